#!/usr/bin/env python3
"""BPF program time of a reference floor and kernelkite side by side on one workload.

Both tracers are attached at once, so every event runs both, and each program's
run_time_ns / run_cnt (kernel.bpf_stats_enabled=1) is printed per program and per
workload operation. docs/PERFORMANCE.md ("Directions tried") was measured with it.

    python3 xtask/scripts/bpf_side_by_side.py [--workload read|pipe] [--floor clock|bit|sched|wakers|empty]
                                              [--untargeted] [--kernelkite target/release/kernelkite]
                                              [--versus OTHER_KERNELKITE]

--workload read: `kk-workload read_loop --count 2000000` (per read());
--workload pipe: `taskset -c 0 perf bench sched pipe -T -l 200000` (per op; kernelkite
  runs with --follow). --untargeted: kernelkite and the floor target an idle process
  instead, so the workload is tested and not traced. Needs root and bpftool.
"""
import argparse, glob, os, re, subprocess, sys, threading, time

p = argparse.ArgumentParser()
p.add_argument('--workload', choices=['read', 'pipe'], default='read')
p.add_argument('--floor', choices=['clock', 'bit', 'sched', 'wakers', 'empty'], default='clock')
p.add_argument('--untargeted', action='store_true')
p.add_argument('--kernelkite', default='target/release/kernelkite')
p.add_argument('--versus', help='another kernelkite binary, traced side by side instead of a floor '
               '(an A/B of two builds: both run `trace` on the same workload at once)')
a = p.parse_args()
KK = a.kernelkite
WL = os.path.join(os.path.dirname(KK), 'kk-workload')
READS, LOOPS = 2_000_000, 200_000


def programs(pid):
    out = {}
    for f in glob.glob(f'/proc/{pid}/fdinfo/*'):
        try:
            t = open(f).read()
        except OSError:
            continue
        i = re.search(r'prog_id:\s*(\d+)', t)
        ns = re.search(r'run_time_ns:\s*(\d+)', t)
        cnt = re.search(r'run_cnt:\s*(\d+)', t)
        if i and ns and cnt:
            out[int(i.group(1))] = (int(ns.group(1)), int(cnt.group(1)))
    return out


def name(prog_id):
    words = subprocess.run(['bpftool', 'prog', 'show', 'id', str(prog_id)],
                           capture_output=True, text=True).stdout.split()
    return words[words.index('name') + 1] if 'name' in words else '?'


stats = '/proc/sys/kernel/bpf_stats_enabled'
before_stats = open(stats).read().strip()
open(stats, 'w').write('1')
idle = subprocess.Popen(['sleep', '600'])
if a.workload == 'read':
    work = subprocess.Popen([WL, 'read_loop', '--count', str(READS), '--wait-stdin'],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(work.stdout.readline().split()[1])
    per, unit = READS, 'read'
else:
    work = subprocess.Popen(['sh', '-c', f'read go; exec taskset -c 0 perf bench sched pipe -T -l {LOOPS}'],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = work.pid
    per, unit = LOOPS, 'op'
target = idle.pid if a.untargeted else pid
floor_args = [] if a.floor == 'empty' else [f'--{a.floor}', '--pid', str(target)]


def trace(binary):
    return subprocess.Popen([binary, 'trace', '--pid', str(target)]
                            + (['--follow'] if a.workload == 'pipe' else []),
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


tracers = {
    'floor': trace(a.versus) if a.versus else subprocess.Popen(
        [KK, 'bench-floor', *floor_args], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL),
    'kernelkite': trace(KK),
}
time.sleep(3)
names, start = {}, {}
for who, t in tracers.items():
    start[who] = programs(t.pid)
    for i in start[who]:
        names[i] = name(i)
# kernelkite stops with its target: keep the last reading taken while it ran.
last = dict(start)
done = False


def poll():
    while not done:
        for who, t in tracers.items():
            r = programs(t.pid)
            if r:
                last[who] = r
        time.sleep(0.02)


poller = threading.Thread(target=poll)
poller.start()
work.stdin.write('go\n')
work.stdin.flush()
work.stdout.read()
work.wait()
done = True
poller.join()
for who in tracers:
    total = 0
    for i, (ns, cnt) in sorted(last[who].items()):
        ns0, cnt0 = start[who].get(i, (0, 0))
        if cnt == cnt0:
            continue
        total += ns - ns0
        print(f'{who:10} {names.get(i, "?"):24} runs {cnt - cnt0:9}  ns/run {(ns - ns0) / (cnt - cnt0):7.1f}'
              f'  ns/{unit} {(ns - ns0) / per:7.1f}')
    print(f'{who:10} total ns/{unit} {total / per:.1f}')
for t in tracers.values():
    t.stdin.close()
    t.send_signal(2)
    t.wait()
idle.kill()
open(stats, 'w').write(before_stats)
