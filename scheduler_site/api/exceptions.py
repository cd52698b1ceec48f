"""API exceptions of our own (kept free of imports from rest_framework.views, which loads
the parser and authentication classes named in settings)."""

from __future__ import annotations

from rest_framework import exceptions


class PayloadTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "The request body is too large."
    default_code = "payload_too_large"
