//! `kk-workload <name> [args]`: workloads whose dominant latency class is known.
fn main() {
    eprintln!("usage: kk-workload <name>");
    std::process::exit(2);
}
