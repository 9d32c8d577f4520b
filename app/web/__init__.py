"""The web layer under every route: the ASGI layers a request passes through (fast path,
body limit, security headers, the deferred API), templates, static assets, units, the
bearer-token check and validation errors in plain words.

Imports app.settings and nothing else of the app.
"""
