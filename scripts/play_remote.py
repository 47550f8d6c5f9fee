"""The reference external game client: plays the run's game and feeds a learner's HTTP endpoint (docs/http-api.md).

    python scripts/train.py --listen 127.0.0.1:8642 --collectors 0          # the learner, in one shell
    python scripts/play_remote.py --server http://127.0.0.1:8642 --token-file save/carracing_default/http_token

`--game` names the game this machine plays, the run's: carracing (the default), gymnasium (config_files/enduro.py) or
supertuxkart (config_files/supertuxkart.py; this machine needs the game set up as the README says). It registers,
takes the run's settings from the answer (the game and the network are built from them), pulls weights by version,
plays races with this project's acting code and sends them; it waits while the server says `paused`, backs off on 429
and network errors, and registers again when the server restarted.
`--games K` runs K game processes, each its own client (one game and one network per process, like the local
collectors: the games then use K cores). Needs the http extra (pip install -e ".[http]"; only msgpack is used here).
Stop it with Ctrl-C or SIGTERM: it disconnects and exits 0.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import socket
import sys
import threading


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", required=True, help="the learner's endpoint, e.g. http://127.0.0.1:8642")
    parser.add_argument("--token-file", required=True, help="the run's save/<run>/http_token (or a copy of it)")
    parser.add_argument(
        "--game",
        default="carracing",
        choices=("carracing", "gymnasium", "supertuxkart"),
        help="the game this machine plays: the run's (default carracing)",
    )
    parser.add_argument("--games", type=int, default=1, help="game processes, each a client of its own (default 1)")
    parser.add_argument("--name", default=f"play_remote@{socket.gethostname()}", help="the client's name in the learner's logs")
    parser.add_argument("--max-races", type=int, default=None, help="stop after this many races per game (default: until stopped)")
    parser.add_argument("--counts-file", default=None, help="write the clients' counts (races sent, retries, ...) here as JSON at exit")
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error(f"--games {args.games}: must be 1 or more")
    if args.max_races is not None and args.max_races < 1:
        parser.error(f"--max-races {args.max_races}: must be 1 or more")
    return args


def game_main(index: int, games: int, args, results) -> None:
    """One game and one client (a process of its own when --games > 1)."""
    from trackmania_rl.agents.acting import use_acting_torch_settings
    from trackmania_rl.rollouts.http.client import RemoteClient, Unauthorized
    from trackmania_rl.rollouts.http.token import read_token

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()
        raise KeyboardInterrupt  # leave a race in progress at once

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    use_acting_torch_settings()

    def log(message: str) -> None:
        print(f"[play_remote {index}] {message}", flush=True)

    name = args.name if games == 1 else f"{args.name}/{index}"
    client = RemoteClient(args.server, read_token(args.token_file), name, index, games, log, game=args.game)
    try:
        counts = client.run(args.max_races, stop)
    except KeyboardInterrupt:
        client.close()
        counts = client.counts
    except Unauthorized as e:
        log(f"error: {e}")
        client.close()
        results[index] = {"error": str(e)}
        sys.exit(3)
    counts = {**counts, "weight_pulls": client.weights.pulls if client.weights else 0}
    log(f"done: {json.dumps(counts)}")
    results[index] = counts


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.games == 1:
        results = {}
        try:
            game_main(0, 1, args, results)
        except SystemExit as e:
            return int(e.code or 0)
    else:
        ctx = multiprocessing.get_context("spawn")
        manager_results = ctx.Manager().dict()
        processes = [ctx.Process(target=game_main, args=(i, args.games, args, manager_results)) for i in range(args.games)]
        for p in processes:
            p.start()

        def forward(signum, frame):
            for p in processes:
                if p.is_alive():
                    p.terminate()  # SIGTERM: each disconnects and exits

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        for p in processes:
            p.join()
        results = dict(manager_results)
        if any(p.exitcode not in (0, None) for p in processes):
            print(f"[play_remote] exit codes: {[p.exitcode for p in processes]}", flush=True)
    if args.counts_file:
        with open(args.counts_file, "w") as f:
            json.dump(results, f)
    return 3 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
