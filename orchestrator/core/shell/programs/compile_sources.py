"""Compile the sources stdin holds as JSON `[[key, file name, base64 bytes], ...]`, writing nothing
(no file, no bytecode); print `[key, line, message]` for each that fails."""
import base64, json, sys

for key, name, data in json.load(sys.stdin):
    try:
        compile(base64.b64decode(data), name, "exec", dont_inherit=True)
    except Exception as exc:  # SyntaxError, IndentationError, ValueError (a NUL byte), ...
        text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        print(json.dumps([key, getattr(exc, "lineno", None), type(exc).__name__ + ": " + text]))
