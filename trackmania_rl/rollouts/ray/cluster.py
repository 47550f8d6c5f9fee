"""Ray nodes on this machine, and the driver's connection to a cluster (docs/cluster.md).

`--ray auto` starts a single-node cluster for the run (`LocalNode.head`); tests and the benchmark add a second
node on another loopback address (`LocalNode.worker`). Every node is `ray start --block`, run by this interpreter
as `python -m ray.scripts.scripts` (no `ray` command needs to be on PATH: an unactivated venv, an IDE, cron), on
an explicit loopback `--node-ip-address` (Ray would otherwise advertise the machine's routable address), with
usage statistics and the dashboard off, an explicit object-store size, token authentication on and the token in
a file inside the node's own temporary folder (never the home folder).

Each node runs under a small watchdog process (`python -m trackmania_rl.rollouts.ray.cluster`) in its own
session: when the process that started the node dies, even by SIGKILL, the watchdog kills the node's whole
process group and removes its temporary folder. So a killed learner leaves no Ray processes behind.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HEAD_IP = "127.0.0.2"
SECOND_NODE_IP = "127.0.0.3"  # tests and benchmarks: a second node on this machine
TOKEN_FILE = "auth_token"
START_TIMEOUT_S = 60.0
STOP_GRACE_S = 5.0
WATCH_PERIOD_S = 0.5

# `ray ...` with the running interpreter: the module behind Ray's console script, found beside the packages this
# process imports rather than on PATH (which may hold another environment's `ray`, or none)
RAY_COMMAND = [sys.executable, "-m", "ray.scripts.scripts"]

# every process that talks to our nodes (the driver included) needs these
RAY_ENVIRONMENT = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
# A task's return value up to this size goes back inside the reply instead of through the node's object store
# (Ray's default: 100 KiB). An actor's handoff answer holds its races (~0.7 MB a CarRacing race, up to ~7 MB an
# Enduro minute): inline, the raylet and the object store take no part in a race. Set for the nodes' processes
# only: the driver's own objects (the published weights) stay in the object store, one copy per node.
INLINE_RETURN_BYTES = 64 << 20


class ClusterError(RuntimeError):
    """A node could not be started or reached; the message says which and why."""


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def check_answers(address: str, wait_s: float = 3.0, clock=time.monotonic, sleep=time.sleep) -> None:
    """ClusterError naming `address` (HOST:PORT) when nothing there accepts a connection within `wait_s` by `clock`:
    ray.init would retry it for a minute or more with a warning a second. Other address forms are left to Ray."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    deadline = clock() + wait_s
    while not port_open(host.strip("[]"), int(port)):
        if clock() >= deadline:
            raise ClusterError(
                f"nothing answers at {address}: start the cluster's head there (ray start --head --port {port}) "
                "or give the address its head printed"
            )
        sleep(0.2)


def use_token_file(path: Path) -> None:
    """Make this process (and the processes it starts) authenticate with the token in `path`."""
    os.environ.update(RAY_ENVIRONMENT)
    os.environ.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the file
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(path)
    # Ray reads the mode and the token once and caches them: have it read them again (as Ray's own tests do),
    # so that the order of imports does not matter and a process can use a second cluster after the first
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@dataclass
class LocalNode:
    """One Ray node started by this process; `stop()` ends it (and the watchdog does if we die)."""

    ip: str
    address: str  # the cluster's GCS address HOST:PORT
    temp_dir: Path
    token_path: Path
    process: subprocess.Popen

    @classmethod
    def head(cls, num_cpus: int, object_store_bytes: int, ip: str = HEAD_IP) -> LocalNode:
        temp_dir = Path(tempfile.mkdtemp(prefix="tmrl_ray_"))  # short: Ray's socket paths must fit in 107 bytes
        token_path = temp_dir / TOKEN_FILE
        token_path.write_text(secrets.token_hex(32))
        token_path.chmod(0o600)
        port = free_port(ip)
        address = f"{ip}:{port}"
        args = ["--head", f"--port={port}", "--include-dashboard=false"]
        node = cls._start(ip, address, temp_dir, token_path, num_cpus, object_store_bytes, args)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_open(ip, port):
            node._check_running(deadline, "the head node")
            time.sleep(0.2)
        return node

    @classmethod
    def worker(cls, head_address: str, token_path: Path, num_cpus: int, object_store_bytes: int, ip: str = SECOND_NODE_IP) -> LocalNode:
        """A node joining `head_address`; ready when the cluster lists it (see `wait_joined`)."""
        temp_dir = Path(tempfile.mkdtemp(prefix="tmrl_ray_"))
        return cls._start(ip, head_address, temp_dir, Path(token_path), num_cpus, object_store_bytes, [f"--address={head_address}"])

    @classmethod
    def _start(cls, ip, address, temp_dir, token_path, num_cpus, object_store_bytes, args) -> LocalNode:
        # Ray starts its workers 15 steps nicer than the node by default (`worker_niceness`): the collector actors
        # would yield their cores to anything else on the machine, where local collectors run at the learner's
        # priority. The nodes started here are the run's own: its actors get the same priority as its collectors.
        env = {**os.environ, **RAY_ENVIRONMENT, "RAY_AUTH_TOKEN_PATH": str(token_path), "RAY_worker_niceness": "0"}
        env["RAY_max_direct_call_object_size"] = str(INLINE_RETURN_BYTES)
        env.pop("RAY_AUTH_TOKEN", None)
        ray_start = [
            *RAY_COMMAND, "start", "--block", *args,
            f"--node-ip-address={ip}",
            f"--num-cpus={int(num_cpus)}",
            f"--object-store-memory={int(object_store_bytes)}",
            "--disable-usage-stats",
            f"--temp-dir={temp_dir}",
        ]  # fmt: skip
        watchdog = [sys.executable, "-m", __name__, str(os.getpid()), str(temp_dir), "--", *ray_start]
        log = open(_log_path(temp_dir), "wb")
        try:
            process = subprocess.Popen(watchdog, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()
        return cls(ip=ip, address=address, temp_dir=temp_dir, token_path=token_path, process=process)

    def _check_running(self, deadline: float, what: str) -> None:
        if self.process.poll() is not None or time.monotonic() > deadline:
            log_text = self.log_tail()
            self.stop()
            raise ClusterError(f"{what} on {self.ip} did not start within {START_TIMEOUT_S:g} s:\n{log_text}")

    def wait_joined(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The node id once the (connected) driver sees this node alive."""
        import ray

        deadline = time.monotonic() + timeout_s
        while True:
            for node in ray.nodes():
                if node["Alive"] and node["NodeManagerAddress"] == self.ip:
                    return node["NodeID"]
            self._check_running(deadline, "the worker node")
            time.sleep(0.2)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return _log_path(self.temp_dir).read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """End the node's processes (the watchdog's session) and remove its folder; bounded in time."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        _kill_group(self.process.pid)
        if self.process.poll() is None:
            self.process.wait(STOP_GRACE_S)
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        _log_path(self.temp_dir).unlink(missing_ok=True)


def _log_path(temp_dir: Path) -> Path:
    """`ray start`'s output, beside the node's folder (which the watchdog removes when the node ends)."""
    return Path(f"{temp_dir}.log")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def connect(address: str, node_ip: str | None = None) -> None:
    """Connect this process (the learner) to the cluster as its driver. The process's SIGINT and SIGTERM handlers
    stay as they were: ray.init puts in a SIGTERM handler of its own that exits at once, before the run's final save."""
    import ray

    check_answers(address)
    host = address.rpartition(":")[0]
    if node_ip is None and host.startswith("127."):
        node_ip = host  # a loopback cluster: find the local node by the address it was started with
    kwargs = {"_node_ip_address": node_ip} if node_ip else {}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    in_main_thread = threading.current_thread() is threading.main_thread()  # only that thread may set handlers
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)} if in_main_thread else {}
    try:
        ray.init(address=address, log_to_driver=True, logging_level="warning", configure_logging=False, **kwargs)
    finally:
        for signum, handler in handlers.items():
            if handler is not None:
                signal.signal(signum, handler)


def _watch(parent_pid: int, temp_dir: str, command: list[str]) -> int:
    """The watchdog: run `command` (ray start --block) and end the whole session when the parent is gone or
    when we are asked to stop (SIGTERM)."""
    child = subprocess.Popen(command)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop and child.poll() is None:
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(WATCH_PERIOD_S)
    if child.poll() is None:
        child.terminate()  # ray start --block stops its node's processes on SIGTERM
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    _kill_rest_of_group()  # whatever is left of the node (raylet, object store, workers)
    shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


def _kill_rest_of_group() -> None:
    group, me = os.getpgrp(), os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getpgid(int(entry)) == group:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


if __name__ == "__main__":
    separator = sys.argv.index("--")
    sys.exit(_watch(int(sys.argv[1]), sys.argv[2], sys.argv[separator + 1 :]))
