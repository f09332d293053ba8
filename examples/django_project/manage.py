#!/usr/bin/env python
"""The example project's manage.py; run it from the repository root (see README.md)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
