//! The /proc sampler through its public API on synthetic /proc trees that change
//! between ticks: the frames it records make a valid bundle that survives a write and a
//! load, across forks, exits, pid reuse and the frame cap.

#![cfg(target_os = "linux")]

use kernelkite::model::FrameKeeper;
use kernelkite::model::{
    load_bundle, validate::validate, write_bundle, Backend, Bundle, Frame, HostConstants,
};
use kernelkite::source::procfs::synthetic::{FakeProc, FakeProcess, FakeThread, PF_KTHREAD};
use kernelkite::source::procfs::{Sampler, SamplerOptions, Scope};

fn host() -> HostConstants {
    HostConstants {
        clock_ticks_per_sec: 100,
        page_size_bytes: 4096,
        num_cpus: 2,
        kernel_release: Some("6.18.0-synthetic".into()),
        arch: "x86_64".into(),
        time_accounting: None,
    }
}

fn bundle_of(frames: Vec<Frame>, cap: kernelkite::model::FrameCap) -> Bundle {
    let mut b = Bundle::new(Backend::Proc, host(), 100);
    b.root_pids = vec![100];
    b.frames = frames;
    b.frame_cap = cap;
    b
}

fn pids(f: &Frame) -> Vec<(i32, u64)> {
    f.processes
        .iter()
        .map(|p| (p.pid, p.start_time_ticks))
        .collect()
}

/// A small machine: init, kthreadd, a kernel worker, an unrelated daemon.
fn machine(fake: &FakeProc) {
    fake.add(&FakeProcess::new(1, 0, "init")).unwrap();
    let mut kthreadd = FakeProcess::new(2, 0, "kthreadd");
    kthreadd.flags |= PF_KTHREAD;
    fake.add(&kthreadd).unwrap();
    let mut worker = FakeProcess::new(9, 2, "kworker/u8:1");
    worker.flags |= PF_KTHREAD;
    fake.add(&worker).unwrap();
    fake.add(&FakeProcess::new(50, 1, "sshd")).unwrap();
}

#[test]
fn a_changing_tree_makes_a_valid_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(&dir.path().join("proc")).unwrap();
    machine(&fake);
    let mut sampler = Sampler::new(fake.root(), SamplerOptions::default()).unwrap();
    let mut keeper = FrameKeeper::new(1000);
    let tick = |sampler: &mut Sampler, keeper: &mut FrameKeeper, t: u64| {
        keeper.push(
            sampler
                .sample(Scope::Subtrees(&[100]), t * 100_000_000)
                .unwrap(),
        );
    };

    // t0: the root alone, with a name that needs care.
    let mut root = FakeProcess::new(100, 1, "(my cmd)");
    fake.add(&root).unwrap();
    tick(&mut sampler, &mut keeper, 0);

    // t1: it forked a two-threaded worker and used CPU.
    root.utime_ticks += 5;
    root.threads[0].schedstat.as_mut().unwrap().on_cpu_ns += 50_000_000;
    root.threads[0].schedstat.as_mut().unwrap().timeslices += 3;
    fake.add(&root).unwrap();
    let mut worker = FakeProcess::new(101, 100, "worker");
    worker.threads.push(FakeThread::new(102, "worker io"));
    fake.add(&worker).unwrap();
    tick(&mut sampler, &mut keeper, 1);

    // t2: the worker exited and was reaped; its pid went to a grandchild of the root
    // via a new child 103.
    fake.remove(101).unwrap();
    root.cutime_ticks += 40;
    fake.add(&root).unwrap();
    fake.add(&FakeProcess::new(103, 100, "child")).unwrap();
    let mut reused = FakeProcess::new(101, 103, "grandchild");
    reused.start_time_ticks = 90_000;
    reused.utime_ticks = 1;
    fake.add(&reused).unwrap();
    tick(&mut sampler, &mut keeper, 2);

    // t3: the child exited, leaving the grandchild to init (not a subreaper here): it
    // leaves the subtree.
    fake.remove(103).unwrap();
    reused.ppid = 1;
    fake.add(&reused).unwrap();
    tick(&mut sampler, &mut keeper, 3);

    let (frames, cap) = keeper.into_parts();
    assert_eq!(
        frames.iter().map(pids).collect::<Vec<_>>(),
        vec![
            vec![(100, 1100)],
            vec![(100, 1100), (101, 1101)],
            vec![(100, 1100), (101, 90_000), (103, 1103)],
            vec![(100, 1100)],
        ]
    );
    assert_eq!(frames[0].processes[0].comm, "(my cmd)");
    assert_eq!(frames[1].processes[0].utime_ticks, 115);
    let w = &frames[1].processes[1];
    assert_eq!(w.num_threads, 2);
    assert_eq!(
        w.threads
            .iter()
            .map(|t| (t.tid, t.comm.as_str()))
            .collect::<Vec<_>>(),
        [(101, "worker"), (102, "worker io")]
    );
    assert_eq!(frames[2].processes[1].ppid, 103);

    let bundle = bundle_of(frames, cap);
    validate(&bundle).expect("sampler output is a valid bundle");
    let path = dir.path().join("synthetic.json");
    write_bundle(&path, &bundle).unwrap();
    assert_eq!(load_bundle(&path).unwrap(), bundle);
}

#[test]
fn the_frame_cap_keeps_the_latest_sample_last() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    machine(&fake);
    let mut sampler = Sampler::new(fake.root(), SamplerOptions::default()).unwrap();
    let mut keeper = FrameKeeper::new(2);
    let mut root = FakeProcess::new(100, 50, "capped");
    for t in 0..5u64 {
        root.utime_ticks = 10 * t;
        // CPU time only grows when the thread runs, which moves its schedstat too.
        if let Some(st) = root.threads[0].schedstat.as_mut() {
            st.on_cpu_ns = 100_000_000 * t;
            st.timeslices = t;
        }
        fake.add(&root).unwrap();
        keeper.push(sampler.sample(Scope::Subtrees(&[100]), t).unwrap());
    }
    let cap = keeper.cap();
    assert_eq!((cap.max_frames, cap.frames_dropped), (2, 3));
    let (frames, cap) = keeper.into_parts();
    assert_eq!(frames.iter().map(|f| f.t_ns).collect::<Vec<_>>(), [0, 4]);
    assert_eq!(frames[1].processes[0].utime_ticks, 40);
    validate(&bundle_of(frames, cap)).unwrap();
}

#[test]
fn descendants_of_a_subreaper_and_host_network() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeProc::new(dir.path()).unwrap();
    machine(&fake);
    fake.add(&FakeProcess::new(60, 1, "kernelkite")).unwrap();
    fake.add(&FakeProcess::new(100, 60, "make")).unwrap();
    fake.add(&FakeProcess::new(120, 60, "orphaned cc1"))
        .unwrap();
    fake.set_net_dev(&[("lo", 100, 2, 100, 2), ("eth0", 1, 1, 2, 2)])
        .unwrap();
    let mut sampler = Sampler::new(
        fake.root(),
        SamplerOptions {
            threads: true,
            network: true,
        },
    )
    .unwrap();
    let frame = sampler.sample(Scope::DescendantsOf(60), 7).unwrap();
    assert_eq!(
        frame.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        [100, 120]
    );
    let net = frame.network.unwrap();
    assert_eq!(
        net.iter().map(|r| r.interface.as_str()).collect::<Vec<_>>(),
        ["eth0", "lo"]
    );
}
