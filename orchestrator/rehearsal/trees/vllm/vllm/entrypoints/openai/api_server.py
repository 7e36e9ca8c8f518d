"""`python -m vllm.entrypoints.openai.api_server --model M ...` (rehearsal)."""

if __name__ == "__main__":
    import sys

    from vllm._rehearsal.server import main

    sys.exit(main(sys.argv[1:], "api_server.py"))
