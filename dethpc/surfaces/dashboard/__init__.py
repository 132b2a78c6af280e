"""The read-only web dashboard (``dethpc dashboard``, docs/observability.md).

``data`` reads the store into JSON-ready dicts (bounded queries: one page of trials at a
time), ``app`` is the starlette application (token check, HTML page, JSON endpoints),
``serve`` binds it and prints the URL and the ``ssh -L`` line. Only ``data`` is
importable without the ``dashboard`` extra (starlette, uvicorn).
"""
