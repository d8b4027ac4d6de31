"""KEEM chat in the browser: `python app.py [--host --port --model ...]` (the Hugging Face Space's app_file too).

The same as `keem chat`; see `python app.py --help`.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

if __name__ == "__main__":
    from chatbot.deploy import zerogpu

    zerogpu.active()  # on ZeroGPU the `spaces` package must be imported before torch
    from chatbot.cli.main import main

    sys.exit(main(["chat", *sys.argv[1:]]))
