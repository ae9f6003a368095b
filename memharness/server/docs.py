"""``/docs``: Swagger UI served from the server's own copy, never from a CDN.

FastAPI's default page loads swagger-ui-bundle.js and its CSS from a public CDN: a browser on
a private network (where this server belongs, README "TLS") shows a blank page, and every
visit tells a third party that the docs were opened. The assets come from the
``swagger-ui-bundle-v2`` package (Swagger UI 5, which renders the OpenAPI 3.1 FastAPI
writes) and are served under ``/docs/assets``; ReDoc, which has no offline copy here, is off.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

ASSETS = "/docs/assets"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"


def add_docs(app: FastAPI) -> None:
    """Mount the Swagger UI assets and the ``/docs`` page on ``app`` (made with
    ``docs_url=None, redoc_url=None``)."""
    from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            oauth2_redirect_url=OAUTH2_REDIRECT,
        )

    @app.get(OAUTH2_REDIRECT, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
