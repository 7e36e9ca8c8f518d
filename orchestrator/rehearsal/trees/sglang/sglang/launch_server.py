"""Launch the server: python -m sglang.launch_server --model-path ... [flags]."""

import sys
import warnings

from sglang.srt.entrypoints.http_server import launch_server
from sglang.srt.server_args import prepare_server_args
from sglang.srt.utils import release_at_least

if __name__ == "__main__":
    if release_at_least("0.5.14"):  # 0.5.14+ recommends `sglang serve`
        warnings.warn(
            "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the recommended entrypoint.",
            UserWarning,
        )
    server_args = prepare_server_args(sys.argv[1:])
    launch_server(server_args)
