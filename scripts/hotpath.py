#!/usr/bin/env python3
"""A protocol's hot path cost per operation on three real servers on loopback.

Runs `meridian bench loopback` (--target, default quorum:QUORUM/QUORUM; raft for Raft
keyspaces; 10,000 records, open loop at a fixed
rate) once with writes only and once with reads only, and over a window of steady load reads
from every server: CPU (/proc/PID/stat), client requests, synced batches and records
(meridian_storage_*), peer messages by type and bytes on the wire (meridian_replication_*,
meridian_transport_*). Then it profiles the first server (/debug/pprof/profile) and counts
its syscalls (strace -c -f, briefly: strace slows the process it traces). Everything is bounded
in time; every process started is stopped.

  scripts/hotpath.py [--bin bin/meridian] [--target quorum:QUORUM/QUORUM] [--rate 1000] [--window 10] [--out DIR]

The rate is per region (three regions): the default offers 3,000 ops/s in all.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

NODES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
METRICS_PORT = 9090


def scrape(host):
    """Returns {series: value} of a node's /metrics (labels kept in the series name)."""
    with urllib.request.urlopen(f"http://{host}:{METRICS_PORT}/metrics", timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def total(snap, prefix, label_filter=None):
    s = 0.0
    for k, v in snap.items():
        if k == prefix or k.startswith(prefix + "{"):
            if label_filter and not re.search(label_filter, k):
                continue
            s += v
    return s


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pids(cluster_yaml):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if b"server" in cmd and cluster_yaml.encode() in cmd:
            pids.append(int(d))
    return sorted(pids)


def snapshot(pids):
    return {"t": time.time(), "cpu": sum(cpu_seconds(p) for p in pids), "nodes": [scrape(h) for h in NODES]}


def delta(a, b, prefix, label_filter=None):
    return sum(total(nb, prefix, label_filter) - total(na, prefix, label_filter) for na, nb in zip(a["nodes"], b["nodes"]))


def msg_types(a, b):
    types = {}
    for na, nb in zip(a["nodes"], b["nodes"]):
        for k, v in nb.items():
            m = re.match(r'meridian_replication_messages_sent_total\{type="([^"]+)"\}', k)
            if m:
                types[m.group(1)] = types.get(m.group(1), 0) + v - na.get(k, 0)
    return {k: v for k, v in types.items() if v > 0}


def run(args, mix, label):
    workdir = tempfile.mkdtemp(prefix="meridian-hotpath-")
    cluster_yaml = os.path.join(workdir, "meridian", "cluster.yaml")
    duration = args.window * 2 + args.strace + 30
    cmd = [args.bin, "bench", "loopback", "--targets", args.target, "--mix", mix, "--records", "10000",
           "--rate", str(args.rate), "--clients", "64", "--duration", f"{duration}s", "--warmup", "5s",
           "--dir", workdir, "--timeout", f"{duration + 120}s"]
    log = open(os.path.join(args.out, f"{label}-bench.log"), "w")
    bench = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Wait for the measured phase (the load and the warm-up are over).
        deadline = time.time() + 180
        while time.time() < deadline:
            with open(log.name) as f:
                if "measuring" in f.read():
                    break
            if bench.poll() is not None:
                sys.exit(f"hotpath: bench exited early; see {log.name}")
            time.sleep(0.5)
        else:
            sys.exit("hotpath: no measured phase within 180 s")
        time.sleep(3)
        pids = server_pids(cluster_yaml)
        if len(pids) != 3:
            sys.exit(f"hotpath: found servers {pids}, want 3")
        a = snapshot(pids)
        prof_path = os.path.join(args.out, f"{label}-n1.pprof")
        with urllib.request.urlopen(f"http://{NODES[0]}:{METRICS_PORT}/debug/pprof/profile?seconds={args.window}",
                                    timeout=args.window + 30) as r, open(prof_path, "wb") as f:
            f.write(r.read())
        b = snapshot(pids)
        # Syscalls of every server over a short window (strace slows them: a count, not a rate).
        strace_path = os.path.join(args.out, f"{label}-strace.txt")
        st = subprocess.Popen(["strace", "-c", "-f", "-o", strace_path] + sum([["-p", str(p)] for p in pids], []),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c = snapshot(pids)
        time.sleep(args.strace)
        st.send_signal(signal.SIGINT)
        st.wait(timeout=30)
        d = snapshot(pids)
    finally:
        os.killpg(bench.pid, signal.SIGINT)
        try:
            bench.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
        subprocess.run(["rm", "-rf", workdir])
    ops = delta(a, b, "meridian_request_duration_seconds_count")
    writes = delta(a, b, "meridian_request_duration_seconds_count", 'op="put"')
    reads = delta(a, b, "meridian_request_duration_seconds_count", 'op="get"')
    secs = b["t"] - a["t"]
    syscalls = 0
    with open(strace_path) as f:
        for line in f:
            m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?total", line)
            if m:
                syscalls = int(m.group(1))
    strace_ops = delta(c, d, "meridian_request_duration_seconds_count")
    res = {
        "label": label, "mix": mix, "ops_per_s": ops / secs, "writes": writes, "reads": reads,
        "server_cpu_cores": (b["cpu"] - a["cpu"]) / secs,
        "server_cpu_us_per_op": (b["cpu"] - a["cpu"]) / ops * 1e6,
        "wal_syncs_per_op": delta(a, b, "meridian_storage_wal_syncs") / ops,
        "records_per_sync": delta(a, b, "meridian_storage_commit_records_sum") / max(1, delta(a, b, "meridian_storage_commit_records_count")),
        "peer_msgs_per_op": delta(a, b, "meridian_replication_messages_sent_total") / ops,
        "peer_wire_bytes_per_op": delta(a, b, "meridian_transport_wire_bytes_sent_total") / ops,
        "peer_wire_writes_per_op": delta(a, b, "meridian_transport_wire_writes_total") / ops,
        "msg_types_per_op": {k: round(v / ops, 3) for k, v in msg_types(a, b).items()},
        "syscalls_per_op_under_strace": syscalls / strace_ops if strace_ops else 0,
        "profile": prof_path,
    }
    return res


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="bin/meridian")
    p.add_argument("--target", default="quorum:QUORUM/QUORUM", help="bench loopback target (one Meridian configuration)")
    p.add_argument("--rate", type=float, default=1000, help="open-loop ops/s per region")
    p.add_argument("--window", type=int, default=10, help="seconds measured (and profiled)")
    p.add_argument("--strace", type=int, default=3, help="seconds of strace -c")
    p.add_argument("--out", default="results/hotpath", help="profiles and logs (not committed)")
    p.add_argument("--only", choices=["write", "read"], help="run one mix only")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mixes = [("write", "read=0,update=1,dist=zipfian"), ("read", "read=1,update=0,dist=zipfian")]
    for label, mix in mixes:
        if args.only and args.only != label:
            continue
        r = run(args, mix, args.target.split(":")[0] + "-" + label)
        print(f"{label}s only at {args.rate:.0f}/s per region: {r['ops_per_s']:.0f} ops/s; "
              f"server CPU {r['server_cpu_us_per_op']:.1f} µs/op ({r['server_cpu_cores']:.2f} cores); "
              f"WAL syncs {r['wal_syncs_per_op']:.3f}/op ({r['records_per_sync']:.1f} records per sync); "
              f"peer messages {r['peer_msgs_per_op']:.2f}/op, {r['peer_wire_bytes_per_op']:.0f} wire bytes/op, "
              f"{r['peer_wire_writes_per_op']:.2f} peer writes/op; syscalls {r['syscalls_per_op_under_strace']:.1f}/op (under strace)")
        print(f"  messages per op by type: {r['msg_types_per_op']}")
        print(f"  profile of n1: go tool pprof -top {r['profile']}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
