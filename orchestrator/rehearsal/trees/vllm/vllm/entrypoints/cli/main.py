"""The `vllm` console script's main (rehearsal): `vllm serve MODEL ...` (entry point
`vllm = vllm.entrypoints.cli.main:main`, as in the real wheel's entry_points.txt)."""

import sys


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] != "serve":
        print("usage: vllm [-h] [-v] {serve} ...", file=sys.stderr)
        print("vllm: error: the rehearsal knows the `serve` subcommand only", file=sys.stderr)
        return 2
    from vllm._rehearsal.server import main as serve

    return serve(args[1:], "vllm serve")


if __name__ == "__main__":
    sys.exit(main())
