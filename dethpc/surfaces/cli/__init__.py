"""The ``dethpc`` command: a typer app that parses, calls the library and prints.

Owns: one module per command group (``*_cmd``), the app and its dispatch (``main``),
what every command shares (``common``, ``shared``) and live progress (``progress``).
Must not: hold logic the library lacks; be imported by anything but ``entry`` and
the remote glue's caller.
"""
