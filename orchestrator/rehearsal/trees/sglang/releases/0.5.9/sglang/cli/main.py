"""`sglang serve ...`: the console script's main(). The rehearsal installs no console script, so it is
also runnable as `python -m sglang.cli.main serve ...`."""

import sys


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in ("serve", "version"):
        print("usage: sglang [-h] {serve,generate,version} ...", file=sys.stderr)
        print(f"sglang: error: argument subcommand: invalid choice: {argv[0] if argv else ''!r} "
              "(choose from 'serve', 'generate', 'version')", file=sys.stderr, flush=True)
        sys.exit(2)
    if argv[0] == "version":
        from sglang.version import __version__

        print(f"sglang version: {__version__}")
        return
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    launch_server(prepare_server_args(argv[1:]))


if __name__ == "__main__":
    main()
