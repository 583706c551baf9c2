from __future__ import annotations

from django.db import models


class Order(models.Model):
    email = models.TextField()
    confirmed = models.BooleanField(default=False)

    class Meta:
        app_label = "django_shop"
