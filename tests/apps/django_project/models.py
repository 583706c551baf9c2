"""The business row a view writes in the same atomic block as its enqueue."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    email = models.TextField()
    confirmed = models.BooleanField(default=False)
