#!/usr/bin/env python3
"""Packets and CPU per operation in the network lab (root; docs/benchmarks.md).

  sudo scripts/lab-packets.py OUTDIR [BINARY] [RATE]

Brings a lan-3 lab up (examples/topologies/lan-3.yaml, with etcd hosts), runs Meridian quorum
QUORUM/QUORUM and then etcd linearizable with YCSB A at a fixed open-loop RATE per region
(default 200), and over a 10 s window of each measured phase reads the router's packet
counters (client links and server links), the servers' CPU (/proc/PID/stat) and the machine's
(/proc/stat); it profiles the first Meridian server into OUTDIR. The lab is torn down at the
end, on success or failure. Every run is bounded (30 s measured, 300 s per system at most).
"""
import json, os, subprocess, sys, time
out = sys.argv[1]
b = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else os.path.abspath("bin/meridian")
rate = float(sys.argv[3]) if len(sys.argv) > 3 else 200
os.makedirs(out, exist_ok=True)
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
def sh(*a, **k): return subprocess.run(list(a), capture_output=True, text=True, **k)
def status(): return json.loads(sh(b, "lab", "status", "--json").stdout)
def pids(word):
    res = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try: cmd = open(f"/proc/{d}/cmdline","rb").read().split(b"\0")
            except OSError: continue
            if word == "meridian" and b"server" in cmd and b"--clock-control" in cmd: res.append(int(d))
            if word == "etcd" and cmd[0].endswith(b"etcd"): res.append(int(d))
    return res
def cpu(ps):
    s = 0
    for p in ps:
        try: f = open(f"/proc/{p}/stat").read().rsplit(")",1)[1].split(); s += (int(f[11])+int(f[12]))/100
        except OSError: pass
    return s
def mcpu():
    f = open("/proc/stat").readline().split()[1:9]
    return sum(int(x) for i,x in enumerate(f) if i not in (3,4))/100
r = sh(b, "lab", "up", "--topology", "examples/topologies/lan-3.yaml", "--peers", "etcd")
if r.returncode: print(r.stderr); sh(b, "lab", "down"); sys.exit(1)
try:
  for t in ["quorum:QUORUM/QUORUM", "etcd:linearizable"]:
    n = t.split(":")[0]
    log = open(f"{out}/bench-{n}.log", "w")
    p = subprocess.Popen([b, "lab", "bench", "--protocols", t, "--workload", "a", "--records", "10000", "--rate", str(rate),
        "--clients", "64", "--duration", "30s", "--warmup", "5s"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    dl = time.time() + 300
    while "measuring" not in open(log.name).read() and time.time() < dl and p.poll() is None: time.sleep(0.5)
    time.sleep(2)
    ps = pids("meridian" if n == "quorum" else n)
    s0, c0, m0, t0 = status(), cpu(ps), mcpu(), time.time()
    if n == "quorum":
        prof = sh("ip", "netns", "exec", "mlab-r1-client", "curl", "-s", "-o", f"{out}/lab-n1.pprof", "http://10.77.1.1:9090/debug/pprof/profile?seconds=10")
    else:
        time.sleep(10)
    s1, c1, m1, t1 = status(), cpu(ps), mcpu(), time.time()
    p.wait(timeout=300)
    secs = t1 - t0
    ops = rate * 3 * secs
    la = {(l["from"], l["to"]): l["packets"] for l in s0["links"]}
    cl = sv = 0
    for l in s1["links"]:
        d = l["packets"] - la.get((l["from"], l["to"]), 0)
        if "client" in l["from"] or "client" in l["to"]: cl += d
        else: sv += d
    print(f"{t}: offered {rate*3:.0f} ops/s; router packets/op: client links {cl/ops:.2f}, server links {sv/ops:.2f}, total {(cl+sv)/ops:.2f}; "
          f"server CPU {(c1-c0)/ops*1e6:.0f} µs/op ({(c1-c0)/secs:.2f} cores, {len(ps)} pids); machine CPU {(m1-m0)/ops*1e6:.0f} µs/op ({(m1-m0)/secs:.2f} cores)", flush=True)
    print("  " + [l for l in open(log.name).read().splitlines() if "throughput" in l.lower() or "ops/s" in l][-1][:200], flush=True)
finally:
  sh(b, "lab", "down")
