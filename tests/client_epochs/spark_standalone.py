"""A Spark standalone cluster on 127.0.0.1 started with pyspark's own launcher: a master and workers of
one core each, as `bin/spark-class org.apache.spark.deploy.master.Master` and `...worker.Worker` start
them, each stopped by its pid. What the tests of the Kafka-to-Kafka pipeline run on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark

from client_epochs.spark.python_exec import python_executable
from client_epochs.spark.source import SHORT_LIVED_JVM
from quorum.net.planned_ports import planned_port as free_port

SPARK_HOME = Path(pyspark.__file__).parent
REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90.0
QUICK_JVM = SHORT_LIVED_JVM
"""The JVM options of every process here (master, workers, driver, executors): a test's JVMs live for a
minute or two and move little data, so the C1 compiler only (a faster start, no C2 compile threads) and
one GC thread, on two cores shared by five JVMs, Kafka and the test."""




class Standalone:
    """The running cluster: its master URL, its processes by role, and where their logs are."""

    def __init__(self, directory: Path, workers: int) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen] = {}
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": python_executable(),
            "SPARK_LOG_DIR": str(directory / "logs"),
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
        }
        self.workers = workers

    def _launch(self, name: str, main: str, *args: str) -> None:
        log = (self.directory / f"{name}.log").open("wb")
        self.processes[name] = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), main, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.directory,
            start_new_session=True,
        )

    def log_of(self, name: str) -> str:
        path = self.directory / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _wait_for_line(self, name: str, line: str) -> None:
        """Wait (START_TIMEOUT_S) for `line` in process `name`'s log: how it says it is up."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while line not in self.log_of(name):
            if self.processes[name].poll() is not None:
                raise RuntimeError(
                    f"spark {name} exited ({self.processes[name].returncode}) before "
                    f"{line!r}:\n{self.log_of(name)[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"spark {name} did not log {line!r} within {START_TIMEOUT_S:g} s:\n{self.log_of(name)[-3000:]}"
                )
            time.sleep(0.2)

    def start(self) -> None:
        self._launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(free_port()),
        )
        self._wait_for_line("master", "I have been elected leader")
        for n in range(self.workers):
            work = self.directory / f"work-{n}"
            work.mkdir()
            self._launch(
                f"worker-{n}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--work-dir",
                str(work),
                "--webui-port",
                str(free_port()),
            )
        for n in range(self.workers):
            self._wait_for_line(f"worker-{n}", "Successfully registered with master")

    def executors(self) -> list[int]:
        """The pids of the executor JVMs the workers launched (each worker's child processes)."""
        found = []
        for name, process in self.processes.items():
            if not name.startswith("worker"):
                continue
            for children in Path(f"/proc/{process.pid}/task").glob("*/children"):  # a JVM forks from any thread
                for pid in children.read_text().split():
                    try:
                        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    except FileNotFoundError:
                        continue
                    if b"CoarseGrainedExecutorBackend" in cmdline:
                        found.append(int(pid))
        return found

    def kill_executor(self, pid: int) -> None:
        """kill -9 one of the executor JVMs this cluster's workers launched (refused for any other pid)."""
        if pid not in self.executors():
            raise ValueError(f"pid {pid} is not an executor of this cluster: {self.executors()}")
        os.kill(pid, signal.SIGKILL)

    def executor_logs(self) -> str:
        """What every executor of every application wrote to its stderr (work-N/app-*/*/stderr)."""
        return "".join(path.read_text(errors="replace") for path in sorted(self.directory.glob("work-*/*/*/stderr")))

    def stop(self) -> None:
        """SIGKILL each process this cluster started (workers first, then the master) and its group."""
        for name in sorted(self.processes, reverse=True):  # worker-N before master
            process = self.processes[name]
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # the worker's executors are in its group
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@contextmanager
def standalone_cluster(directory: Path, workers: int = 2) -> Iterator[Standalone]:
    cluster = Standalone(directory, workers)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def cluster_session(cluster: Standalone, app: str, log_level: str = "ERROR"):
    """A SparkSession on `cluster`'s master with `kafka_epochs` registered; its executors run this
    interpreter with this checkout first on their path, one core each."""
    from examples.spark_mirror import session

    return session(
        cluster.url,
        app,
        log_level,
        conf={
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": QUICK_JVM,
            "spark.executor.extraJavaOptions": QUICK_JVM,
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.cores.max": str(cluster.workers),
            "spark.executorEnv.PYTHONPATH": str(REPO),
            # what only makes a test wait: Python tasks have no preferred executor, so no locality wait;
            # an idle query reports its progress (numInputRows 0) each second, not each 10 s
            "spark.locality.wait": "0",
            "spark.sql.streaming.noDataProgressEventInterval": "1000",
        },
    )
