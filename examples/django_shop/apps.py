from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "examples.django_shop"
    label = "django_shop"
