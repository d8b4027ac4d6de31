"""`keem serve`: N app processes, M update workers and HAProxy on one machine, kept running by supervisord.

It writes haproxy.cfg and supervisord.conf (from the templates in chatbot/deploy/) into a run folder and replaces
itself with supervisord, an existing process manager (Debian's `supervisor` package, or `pip install
'keem-chat[serve]'`): SIGTERM to it stops everything, each app ending its open sessions and each worker finishing
its running jobs. docs/scaling.md explains the setup.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from string import Template
from typing import Any

from chatbot.cli.options import EMBEDDER, MODELS, STORE, UPDATES, add_command
from chatbot.settings import Settings
from models.errors import InputError

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
HAPROXY = ("haproxy", "/usr/sbin/haproxy")
SUPERVISORD = ("supervisord", "/usr/bin/supervisord")
EPILOG = """examples:
  keem serve --processes 2 --workers 1 --model demo          # http://127.0.0.1:7860, apps on 7861-7862
  KEEM_AUTH='minsu:pw1,jiwoo:pw2' OPENAI_BASE_URL=http://gpu1:8000/v1 keem serve --processes 4 --workers 2 \\
      --model openai:eeve --host 0.0.0.0 --db /srv/keem/keem.db
  keem serve --processes 2 --write-only --run-dir run          # only write run/haproxy.cfg, run/supervisord.conf
  supervisorctl -c run/supervisord.conf status                 # what runs, from another terminal"""


def add_serve_parser(subs: Any) -> argparse.ArgumentParser:
    p = add_command(
        subs,
        "serve",
        "run N app processes, M update workers and HAProxy (cookie stickiness) on this machine with supervisord",
        EPILOG,
        description="Start several app processes (KEEM_WORKER=off) on one store, update workers (`keem worker`) and "
        "HAProxy in front of them, which keeps each browser tab on its process by a cookie. Settings go to every "
        "process through the environment (KEEM_*, OPENAI_*): secrets never land in the written files.",
        parents=[STORE, MODELS, EMBEDDER, UPDATES],
        run=run_serve,
    )
    p.add_argument("--processes", type=int, default=2, help="app processes (default 2; about one per core)")
    p.add_argument("--workers", type=int, default=1, help="update worker processes (default 1)")
    p.add_argument("--host", help="address HAProxy binds (KEEM_HOST; default 127.0.0.1); the apps bind 127.0.0.1")
    p.add_argument("--port", type=int, help="HAProxy's port (KEEM_PORT; default 7860); the apps take the next N")
    p.add_argument("--auth-file", help="require a login (as `keem chat --auth-file`; or the KEEM_AUTH secret)")
    p.add_argument("--run-dir", type=Path, help="where the configs and logs go (default: keem-run in this folder)")
    p.add_argument("--write-only", action="store_true", help="write the configs and exit, for your own supervisor")
    return p


def find(names: tuple[str, ...], hint: str) -> str:
    """The first of `names` on PATH (or an absolute one that exists), else an error saying how to install it."""
    for name in names:
        found = shutil.which(name) or (name if os.path.isabs(name) and os.access(name, os.X_OK) else None)
        if found:
            return found
    raise InputError(f"{names[0]} is not installed: {hint}")


def _esc(value: object) -> str:
    """A value for supervisord's config, where '%' starts an expansion."""
    return str(value).replace("%", "%%")


def setting_env(settings: Settings) -> dict[str, str]:
    """KEEM_<FIELD> for every setting that differs from the default: how the flags of `keem serve` reach the
    processes (through the environment, never the written config)."""
    default, env = Settings(), {}
    for f in dataclasses.fields(Settings):
        value = getattr(settings, f.name)
        if value != getattr(default, f.name) and f.name not in ("host", "port"):
            env[f"KEEM_{f.name.upper()}"] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return env


def haproxy_config(host: str, port: int, app_ports: list[int]) -> str:
    servers = "\n".join(
        f"    server app{i} 127.0.0.1:{p} cookie app{i} check inter 2s" for i, p in enumerate(app_ports, 1)
    )
    # weight 256 (the most): the consistent hash gives each server points on its ring in proportion to its weight, and
    # at weight 1 two processes took 57% and 43% of 2,000 tokens (12 and 28 of a run's 40 callers); at 256, 51/49
    api_servers = "\n".join(
        f"    server app{i} 127.0.0.1:{p} check inter 2s weight 256" for i, p in enumerate(app_ports, 1)
    )
    return Template((DEPLOY / "haproxy.cfg").read_text()).substitute(
        bind=host, port=port, servers=servers, api_servers=api_servers
    )


def supervisord_config(
    run: Path, app_ports: list[int], workers: int, haproxy: str, *, auth_file: str | None = None
) -> str:
    python, cwd = _esc(sys.executable), _esc(Path.cwd())
    logs = _esc(run / "logs")
    auth = f" --auth-file {_esc(Path(auth_file).resolve())}" if auth_file else ""

    def program(name: str, command: str, env: str, stop_s: int, priority: int) -> str:
        return (
            f"\n[program:{name}]\ncommand={command}\ndirectory={cwd}\nenvironment={env}\npriority={priority}\n"
            f"autorestart=true\nstartsecs=3\nstopsignal=TERM\nstopwaitsecs={stop_s}\nstopasgroup=true\n"
            f"killasgroup=true\nredirect_stderr=true\nstdout_logfile={logs}/{name}.log\n"
        )

    parts = [
        program(
            f"app{i}",
            f"{python} -m chatbot.cli.main chat --host 127.0.0.1 --port {p}{auth}",
            'KEEM_WORKER="off",GRADIO_ANALYTICS_ENABLED="False"',
            30,
            100,
        )
        for i, p in enumerate(app_ports, 1)
    ]
    parts += [
        program(f"worker{i}", f"{python} -m chatbot.cli.main worker", 'PYTHONUNBUFFERED="1"', 45, 100)
        for i in range(1, workers + 1)
    ]
    parts.append(program("haproxy", f"{_esc(haproxy)} -db -f {_esc(run / 'haproxy.cfg')}", 'LANG="C.UTF-8"', 10, 200))
    return Template((DEPLOY / "supervisord.conf").read_text()).substitute(
        processes=len(app_ports), workers=workers, run=_esc(run), programs="".join(parts)
    )


def _check_free(host: str, ports: list[int]) -> None:
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host if port == ports[0] else "127.0.0.1", port))
            except OSError:
                raise InputError(f"port {port} is in use; choose another --port (apps take the next ones)") from None


def run_serve(settings: Settings, args: argparse.Namespace) -> int:
    """Write the run folder's configs, check them, then exec supervisord (or stop there with --write-only)."""
    if args.processes < 1 or args.workers < 1:
        raise InputError("--processes and --workers need 1 or more each (a worker runs every memory update)")
    host = args.host or settings.host
    port = args.port or settings.port
    app_ports = [port + i for i in range(1, args.processes + 1)]
    run = (args.run_dir or Path("keem-run")).resolve()
    (run / "logs").mkdir(parents=True, exist_ok=True)
    haproxy = find(HAPROXY, "apt-get install haproxy (Debian/Ubuntu), or put HAProxy 2.x on PATH")
    (run / "haproxy.cfg").write_text(haproxy_config(host, port, app_ports))
    checked = subprocess.run([haproxy, "-c", "-q", "-f", str(run / "haproxy.cfg")], capture_output=True, text=True)
    if checked.returncode != 0:
        raise InputError(f"HAProxy refuses {run / 'haproxy.cfg'}: {(checked.stderr or checked.stdout).strip()[:300]}")
    (run / "supervisord.conf").write_text(
        supervisord_config(run, app_ports, args.workers, haproxy, auth_file=args.auth_file)
    )
    print(f"wrote {run / 'haproxy.cfg'} and {run / 'supervisord.conf'}", file=sys.stderr)
    if args.write_only:
        return 0
    from chatbot.stores import open_checked

    # the store once here, migrated: one that cannot be used, or that a newer keem migrated, is one line (exit 2)
    # before any program starts, not every app process and worker failing under supervisord
    open_checked(settings.db_path, settings.backup_dir).close()
    supervisord = find(SUPERVISORD, "apt-get install supervisor, or pip install 'keem-chat[serve]'")
    _check_free(host, [port, *app_ports])
    os.environ.update(setting_env(dataclasses.replace(settings, worker="off")))
    print(
        f"serving on http://{host}:{port}/ ({args.processes} app processes on ports {app_ports[0]}-{app_ports[-1]}, "
        f"{args.workers} update worker(s)); logs in {run / 'logs'}; SIGTERM or Ctrl-C stops everything",
        file=sys.stderr,
        flush=True,
    )
    os.execv(supervisord, [supervisord, "-c", str(run / "supervisord.conf")])
    return 0  # not reached
