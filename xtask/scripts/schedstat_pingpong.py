#!/usr/bin/env python3
"""Per-thread on_cpu and runqueue of `kernelkite trace --pid` against schedstat, on two
threads that ping-pong through pipes (tests/workloads/c/pingpong.c, built with gcc).

The process starts first and both threads wait on a gate; kernelkite attaches; the
driver reads /proc/PID/task/TID/schedstat (field 1: se.sum_exec_runtime, field 2:
run_delay, field 3: timeslices), opens the gate, waits for the ping-pong to end and the threads to park,
reads schedstat again, stops kernelkite and compares each thread's classes (from
`kernelkite export --format json`) with the moves of the two fields. Needs root.

    python3 xtask/scripts/schedstat_pingpong.py [--seconds S] [--runs N] [--kernelkite PATH]
"""
import argparse, json, os, signal, subprocess, tempfile, time

p = argparse.ArgumentParser()
p.add_argument('--seconds', type=float, default=1.0)
p.add_argument('--runs', type=int, default=3)
p.add_argument('--kernelkite', default='target/release/kernelkite')
a = p.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
source = os.path.join(here, '..', '..', 'tests', 'workloads', 'c', 'pingpong.c')
work = tempfile.mkdtemp(prefix='kk-pingpong-')
binary = os.path.join(work, 'pingpong')
subprocess.run(['gcc', '-O2', '-pthread', '-o', binary, source], check=True)


def schedstat(pid, tid):
    with open(f'/proc/{pid}/task/{tid}/schedstat') as f:
        return [int(x) for x in f.read().split()[:3]]


def classes_by_tid(analysis):
    rows = {}

    def walk(o):
        if isinstance(o, dict):
            if 'tid' in o and 'classes' in o:
                rows[o['tid']] = o['classes']
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(analysis)
    return rows


def ns(classes, name):
    return classes.get(f'{name}_ns', classes.get(name))


for run in range(a.runs):
    w = subprocess.Popen([binary, str(a.seconds)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    tids = [int(w.stdout.readline().split()[1]) for _ in range(2)]
    bundle = os.path.join(work, f'run{run}.json')
    k = subprocess.Popen([a.kernelkite, 'trace', '--pid', str(w.pid), '-o', bundle],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # attached (spawn to hooks live is ~150 ms)
    before = {t: schedstat(w.pid, t) for t in tids}
    w.stdin.write('g\n')
    w.stdin.flush()
    assert w.stdout.readline().strip() == 'done'
    time.sleep(0.3)  # both threads parked
    after = {t: schedstat(w.pid, t) for t in tids}
    k.send_signal(signal.SIGINT)
    k.wait()
    w.stdin.write('g\n')
    w.stdin.flush()
    w.wait()
    out = subprocess.run([a.kernelkite, 'export', '--format', 'json', bundle],
                         capture_output=True, text=True, check=True).stdout
    rows = classes_by_tid(json.loads(out))
    for t in tids:
        c = rows[t]
        cpu, delay = after[t][0] - before[t][0], after[t][1] - before[t][1]
        on_cpu, runqueue = ns(c, 'on_cpu'), ns(c, 'runqueue')
        waits = after[t][2] - before[t][2] if len(after[t]) > 2 else 0
        print(f'run {run} tid {t}: on_cpu {on_cpu} vs schedstat {cpu} ({on_cpu - cpu:+d} ns), '
              f'runqueue {runqueue} vs run_delay {delay} ({(runqueue - delay) / max(delay, 1):+.2%}; '
              f'{waits} timeslices, {delay / max(waits, 1):.0f} ns of run_delay each)')
