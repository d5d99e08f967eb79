"""The web admin (pages, /api/v1) and the ops endpoints (/metrics, receivers): one FastAPI app.

``web.app.create_web_app`` builds it; nothing is imported here, so the config tree can import
``web.settings`` without the app."""
