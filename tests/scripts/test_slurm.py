"""scripts/slurm/*.sbatch on a real single-node Slurm on localhost, started by this test.

Slurm and munge must be installed already: .ci/run installs Debian's slurm-wlm and munge before
the tests (scripts/slurm/install-debian.sh, as root); a test never installs anything. Without
them the tests skip and say why. The fixture writes its own slurm.conf and munge key in a temp
dir, starts munged, slurmctld and slurmd, and at the end cancels what jobs are left and stops
the daemons by their pids. Where that cannot be done the tests skip and say why.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import ROOT, SLICE

pytestmark = pytest.mark.slow

SLURM_DIR = ROOT / "scripts" / "slurm"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/sbin") if (p := Path(d) / name).exists()), None
    )


def missing() -> str | None:
    """None when every program is there, else why the tests skip (.ci/run says why it could not
    install them in RESCORER_SLURM_MISSING)."""
    absent = [name for name in DAEMONS if not find(name)]
    if not absent:
        return None
    why = os.environ.get("RESCORER_SLURM_MISSING") or (
        "install it as root with scripts/slurm/install-debian.sh (.ci/run does)"
    )
    return f"Slurm is not installed (no {', '.join(absent)}): {why}"


class Cluster:
    """munged + slurmctld + slurmd on this host, configured in ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.host = socket.gethostname().split(".")[0]
        self.procs: list[subprocess.Popen[bytes]] = []
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        f = self.folder
        for sub in ("state", "spool", "logs"):
            (f / sub).mkdir()
        key = f / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = f / "munge.socket"
        self.procs.append(
            subprocess.Popen(
                [find("munged"), "--foreground", "--force", f"--key-file={key}",
                 f"--socket={sock}", f"--pid-file={f / 'munged.pid'}",
                 f"--log-file={f / 'logs' / 'munged.log'}", f"--seed-file={f / 'munge.seed'}"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
        )  # fmt: skip
        self.wait_for(sock.exists, "munged's socket")
        cpus = os.cpu_count() or 1
        self.conf.write_text(
            f"""ClusterName=rescorertest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={f / "state"}
SlurmdSpoolDir={f / "spool"}
SlurmctldPidFile={f / "slurmctld.pid"}
SlurmdPidFile={f / "slurmd.pid"}
SlurmctldLogFile={f / "logs" / "slurmctld.log"}
SlurmdLogFile={f / "logs" / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=3600
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
"""
        )
        for cmd in (
            [find("slurmctld"), "-D", "-i", "-f", str(self.conf)],
            [find("slurmd"), "-D", "-f", str(self.conf), "-N", self.host],
        ):
            self.procs.append(
                subprocess.Popen(
                    cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )  # type: ignore[arg-type]
            )
        self.wait_for(self.node_ready, "slurmd to register with slurmctld", 60)

    def node_ready(self) -> bool:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited: {self.logs()}")
        out = self.run("sinfo", "-h", "-o", "%t", check=False)
        return out.strip() in ("idle", "mix", "alloc")

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
            for p in sorted((self.folder / "logs").glob("*.log"))
        )

    def wait_for(self, ready: Callable[[], bool], what: str, seconds: float = 30) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}\n{self.logs()}")

    def run(self, *cmd: str, check: bool = True) -> str:
        proc = subprocess.run(
            [find(cmd[0]) or cmd[0], *cmd[1:]], env=self.env, capture_output=True, text=True
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {proc.stderr}\n{self.logs()}")
        return proc.stdout

    def stop(self) -> None:
        """Cancel the jobs still queued or running (a failed test leaves them; their steps run
        in slurmstepd processes of their own, which stopping slurmd would leave behind), then
        stop the daemons, last started first."""
        if len(self.procs) == 3 and all(proc.poll() is None for proc in self.procs):
            self.run("scancel", "--partition=test", check=False)
            with contextlib.suppress(RuntimeError):
                self.wait_for(lambda: not self.run("squeue", "-h", check=False).strip(), "", 60)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def states(self, job: str) -> dict[str, str]:
        """Array task id -> state of every task of ``job`` still known to slurmctld."""
        out = self.run("scontrol", "-o", "show", "job", job, check=False)
        found = {}
        for line in out.splitlines():
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if "ArrayTaskId" in fields:
                found[fields["ArrayTaskId"]] = fields["JobState"]
        return found


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = missing()
    if why:
        pytest.skip(why)
    folder = tmp_path_factory.mktemp("slurm")
    c = Cluster(folder)
    try:
        c.start()
    except RuntimeError as exc:
        c.stop()
        pytest.skip(f"the Slurm daemons did not start here: {str(exc)[:1500]}")
    yield c
    c.stop()


def make_table(path: Path, copies: int) -> int:
    """The slice ``copies`` times over, sources made distinct per copy (tables are grouped by
    source); returns the line count."""
    lines = gzip.decompress(SLICE.read_bytes()).decode().splitlines()
    out = [f"{i:02d}{line}" for i in range(copies) for line in lines]
    path.write_bytes(gzip.compress(("\n".join(out) + "\n").encode()))
    return len(out)


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Random hidden-256 weights: slow enough on one thread that a task can be caught mid-way."""
    folder = tmp_path_factory.mktemp("model") / "m"
    code = (
        "import sys, torch; from rescorer.io.table import read_table;"
        "from rescorer.vocab import build_vocabs;"
        "from rescorer.model.encdec import EncoderDecoder, ModelConfig, init_weights_;"
        "from rescorer.model.checkpoint import save_model_dir;"
        "p=[(e.src, e.tgt) for e in read_table(sys.argv[1])]; s,t=build_vocabs(p, 3000, 3000);"
        "torch.manual_seed(0); m=EncoderDecoder(ModelConfig(3000, 3000, hidden_size=256));"
        "init_weights_(m); save_model_dir(sys.argv[2], m, s, t, {'made_by': 'test_slurm'})"
    )
    subprocess.run([sys.executable, "-c", code, str(SLICE), str(folder)], check=True)
    return folder


def wait_until(check: Callable[[], bool], what: str, seconds: float, cluster: Cluster) -> None:
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        if check():
            print(f"{what}: {time.monotonic() - start:.1f} s")  # shown with pytest -s
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out: {what}\n{cluster.logs()}")


def test_score_array_with_a_cancelled_and_requeued_task_merges_to_the_single_run(
    cluster: Cluster, slow_model: Path, tmp_path: Path
) -> None:
    table = tmp_path / "big.gz"
    lines = make_table(table, 6)
    common = ["--chunk-bytes", "8192", "--precision", "fp32", "--device", "cpu"]
    env = {
        **cluster.env,
        "OMP_NUM_THREADS": "1",
        "RESCORER": f"{sys.executable} -m rescorer",
        "RESCORER_DEVICE": "cpu",
        # a record after each chunk, so the test sees one before the 10 s default would write it
        "RESCORER_SCORE_ARGS": " ".join([*common[:4], "--checkpoint-every", "0"]),
    }
    submit = subprocess.run(
        [find("sbatch"), "--parsable", "--array=1-3", f"--chdir={tmp_path}", "--cpus-per-task=1",
         str(SLURM_DIR / "score.sbatch"), str(table), str(slow_model), str(tmp_path / "pt")],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    job = submit.stdout.strip().split(";")[0]
    record = tmp_path / "pt.2-of-3.gz.partial.json"
    wait_until(record.exists, "task 2 to write its first checkpoint", 120, cluster)
    cluster.run("scancel", f"{job}_2")
    wait_until(lambda: cluster.states(job).get("2") == "CANCELLED", "task 2 cancelled", 60, cluster)
    assert not (tmp_path / "pt.2-of-3.gz").exists() and record.exists()  # stopped mid-way
    cluster.run("scontrol", "requeue", f"{job}_2")
    # Slurm holds a requeued job back for a while (BeginTime); no need to wait for that here.
    cluster.run("scontrol", "update", f"jobid={job}_2", "StartTime=now", check=False)
    done = {"1": "COMPLETED", "2": "COMPLETED", "3": "COMPLETED"}
    wait_until(lambda: cluster.states(job) == done, "all three tasks to complete", 300, cluster)
    log2 = (tmp_path / f"rescorer-score-{job}_2.log").read_text()
    assert log2.count("score.sbatch: shard 2/3") == 2, log2  # the same task ran twice
    second = int(re.findall(r"scored ([\d,]+) pairs", log2)[-1].replace(",", ""))
    in_shard = json.loads((tmp_path / "pt.2-of-3.gz.manifest.json").read_text())["lines"]["in"]
    assert 0 < second < in_shard, "the requeued task resumes: it scores only what was left"
    merged = tmp_path / "merged.gz"
    proc = subprocess.run(
        [sys.executable, "-m", "rescorer", "merge", "--manifest-glob",
         str(tmp_path / "pt.*-of-3.gz.manifest.json"), "-o", str(merged)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"{lines:,} of {lines:,} lines" in proc.stderr
    whole = tmp_path / "whole.gz"
    subprocess.run(
        [sys.executable, "-m", "rescorer", "score", str(table), "-m", str(slow_model), "-o",
         str(whole), "-q", *common],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True,
    )  # fmt: skip
    assert merged.read_bytes() == whole.read_bytes()


def test_train_sbatch_runs_torchrun_and_a_resubmitted_job_continues(
    cluster: Cluster, tmp_path: Path
) -> None:
    """train.sbatch on one node, two CPU ranks; submitted again with more updates it resumes."""
    model = tmp_path / "model"
    env = {
        **cluster.env,
        "RESCORER": f"{sys.executable} -m rescorer",
        "RESCORER_PYTHON": sys.executable,
        "RESCORER_NPROC_PER_NODE": "2",
        "RESCORER_PORT": str(free_port()),
    }
    flags = ["--hidden-size", "8", "--embed-size", "6", "--maxout-units", "5",
             "--src-vocab-size", "200", "--tgt-vocab-size", "200", "--batch-size", "8",
             "--valid-every", "10", "--device", "cpu", "--precision", "fp32"]  # fmt: skip
    table = ROOT / "tests" / "data" / "tiny-system" / "phrase-table.gz"
    for updates in (20, 30):
        submit = subprocess.run(
            [find("sbatch"), "--parsable", "--nodes=1", f"--cpus-per-task={os.cpu_count()}",
             f"--chdir={tmp_path}", str(SLURM_DIR / "train.sbatch"), str(table), str(model),
             *flags, "--max-updates", str(updates)],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        job = submit.stdout.strip()

        def finished(job: str = job) -> bool:
            out = cluster.run("scontrol", "-o", "show", "job", job, check=False)
            return any(f"JobState={s}" in out for s in ("COMPLETED", "FAILED", "CANCELLED"))

        wait_until(finished, f"training job {job}", 300, cluster)
        log = (tmp_path / f"rescorer-train-{job}.log").read_text()
        assert "JobState=COMPLETED" in cluster.run("scontrol", "-o", "show", "job", job), log
        assert "x 2 ranks" in log and f"stopped (max-updates) after {updates} updates" in log
    assert "resuming at update 20" in log
    assert json.loads((model / "provenance.json").read_text())["resumed"][0]["world_size"] == 2
