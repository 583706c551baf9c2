"""Django + workerpool: an order and its confirmation job (docs/recipes/django.md).

Run it (the settings read ``$WORKERPOOL_DATABASE_URL``):

    export DJANGO_SETTINGS_MODULE=examples.django_shop.settings
    workerpool migrate && django-admin migrate --run-syncdb
    workerpool run examples.django_shop.jobs:pool &
    django-admin runserver
"""
