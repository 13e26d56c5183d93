//! `rkube kubelet` without the rest of the CLI (handy for load runs):
//! `cargo run -p rkube-kubelet --example kubelet -- --runtime sim --nodes 1000 --kubeconfig K`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(rkube_kubelet::main(args));
}
