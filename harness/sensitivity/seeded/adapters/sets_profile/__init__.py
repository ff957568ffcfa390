"""Seeded adapter: installs a profile function at import."""

import sys


def _profile(frame, event, arg):
    return None


sys.setprofile(_profile)
