"""The read-only web dashboard (``dethpc dashboard``, docs/observability.md).

Owns: ``data`` (the store read into JSON-ready dicts; bounded queries: one page of
trials at a time), ``app`` (the starlette application: token check, HTML page, JSON
endpoints) and ``serve`` (binds it and prints the URL and the ``ssh -L`` line). Only
``data`` is importable without the ``dashboard`` extra (starlette, uvicorn).
Must not: write to the store or act on experiments.
"""
