"""The API reference: the OpenAPI 3.1 document generated from the code (``/api/v2/openapi.json``) and its page."""
