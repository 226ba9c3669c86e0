//! TLS against plain TCP: acquire and renewal through the library API, interleaved.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_elector::redlock::{Acquire, Notice, Redlock};
use tokio_util::sync::CancellationToken;

use crate::args::Opts;
use crate::common::{Pki, Redis};
use crate::harness::{library_lock, wait_connected, wait_quarantine};
use crate::report::{Report, Spec, ms, pct};

/// Acquire and renewal over TLS against plain TCP, same run, interleaved so that both see the
/// same machine load: three TLS-only nodes (certificates from `openssl`) beside three plain ones.
pub fn run(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, plain: &[&Redis]) {
    eprintln!("== TLS vs plain TCP: acquire + renew (library API), 3 nodes each");
    let iters = o.n(1000, 100);
    let pki = Pki::new();
    let tls_nodes: Vec<Redis> = (0..3).map(|_| Redis::start_tls(&pki, false, &[])).collect();
    wait_quarantine(
        &tls_nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(1),
    );
    let ca = pki.arg("ca.crt");
    let tcp_urls: Vec<String> = plain.iter().map(|n| n.url()).collect();
    let tls_urls: Vec<String> = tls_nodes
        .iter()
        .map(|n| format!("rediss://localhost:{}", n.port))
        .collect();
    let stop = CancellationToken::new();
    let locks = [
        library_lock(rt, &stop, "bench-tls-tcp", &tcp_urls, &[]),
        library_lock(
            rt,
            &stop,
            "bench-tls-tls",
            &tls_urls,
            &["--redis-tls-ca-file", &ca],
        ),
    ];
    wait_connected(&[&locks[0], &locks[1]], "TCP and TLS library nodes");
    let [acq, ren] = rt.block_on(sample(&locks, iters));
    stop.cancel();
    let (a_tcp, a_tls) = (pct(&acq[0], 0.5), pct(&acq[1], 0.5));
    let (r_tcp, r_tls) = (pct(&ren[0], 0.5), pct(&ren[1], 0.5));
    let n = format!("{} rounds each, interleaved", acq[0].len());
    #[rustfmt::skip]
    rep.add("tls", vec![
        Spec::info("acquire p50, plain TCP", a_tcp, "ms", &n),
        Spec::info("acquire p50, TLS", a_tls, "ms", "TLS 1.3 (rustls, ring), CA from redis.tls.caFile"),
        Spec::info("acquire p99, plain TCP", pct(&acq[0], 0.99), "ms", ""),
        Spec::info("acquire p99, TLS", pct(&acq[1], 0.99), "ms", ""),
        Spec::info("renewal round p50, plain TCP", r_tcp, "ms", ""),
        Spec::info("renewal round p50, TLS", r_tls, "ms", ""),
        Spec::info("TLS / TCP acquire p50", a_tls / a_tcp, "x", ""),
        Spec::info("TLS / TCP renewal p50", r_tls / r_tcp, "x", ""),
    ]);
}

/// `iters` acquire + renew + release on each lock in turn (after a tenth as warm-up):
/// `[acquire, renew]` times in ms, per lock.
async fn sample(locks: &[Arc<Redlock>; 2], iters: usize) -> [[Vec<f64>; 2]; 2] {
    let (mut acq, mut ren) = ([vec![], vec![]], [vec![], vec![]]);
    let names = ["tcp", "tls"];
    for i in 0..iters + iters / 10 {
        for (k, redlock) in locks.iter().enumerate() {
            let t0 = Instant::now();
            let lease = match redlock.acquire("bench", false).await {
                Acquire::Acquired(l) => l,
                other => panic!("acquire over {} failed on free nodes: {other:?}", names[k]),
            };
            let t1 = Instant::now();
            let renewed = redlock.renew(&lease).await;
            let t2 = Instant::now();
            assert!(renewed.is_some(), "renewal over {} failed", names[k]);
            redlock.release(&lease.value, Notice::Silent).await;
            if i >= iters / 10 {
                acq[k].push(ms(t1 - t0));
                ren[k].push(ms(t2 - t1));
            }
        }
    }
    [acq, ren]
}
