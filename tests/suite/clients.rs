//! The client snippets of `examples/clients/` (shell, Python, Go, Node; `docs/clients.md`
//! includes them), run as a user runs them, against a real sidecar pair through two handovers.
//!
//! Every snippet, in each of its three modes (`poll`, `watch` = long-poll, `work` = run work
//! only while leading, each write with the fencing token), runs at the same time against one
//! sidecar, "mine", of a pair on three real Redis servers:
//! 1. the other sidecar leads: each snippet says `leader=false`;
//! 2. the other one steps down (`POST /leader/step-down`), mine leads with token t1: each says
//!    `leader=true token=t1`, and `work` writes with t1;
//! 3. mine is frozen (SIGSTOP): `/leader` does not answer, and each snippet must say
//!    `leader=false` by itself (`work` at its lease deadline, from `valid_for_ms`); the other
//!    sidecar takes over, then mine resumes;
//! 4. the other one steps down again, mine leads with t2 > t1: each says `leader=true token=t2`.
//!
//! Each snippet's whole output must be exactly that story: no flap, no write outside a term, every
//! write with its term's token. A missing runtime fails the test with the command that installs it.
//!
//! Each snippet's fourth mode, `leases` (several leases: the set this replica leads, by long-poll
//! of `GET /leases`), runs against a pair of sidecars with three leases each
//! ([`client_snippets_follow_several_leases`]): it must print the set the sidecar leads, with the
//! tokens, through step-downs of single leases (`POST /leases/{name}/step-down`) and a SIGTERM.

use testkit::common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const TTL: Duration = Duration::from_secs(2);
const MODES: [&str; 3] = ["poll", "watch", "work"];

/// The snippets' directory.
fn examples() -> PathBuf {
    testkit::repo().join("examples/clients")
}

/// A program on PATH (or in `extra_dirs`), or a panic that says how to install it.
fn program(name: &str, extra_dirs: &[&str], install: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(extra_dirs.iter().copied())
        .chain(["/usr/bin", "/usr/local/bin"])
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found on PATH: tests/suite/clients.rs runs the client snippets of \
                 examples/clients/ with it. {install} (or run ./scripts/test.sh, which does)"
            )
        })
}

/// Build the Go snippet into `dir` with the local toolchain only (no module download: its
/// go.mod has no requirements), after checking that it is gofmt-clean (readers copy it).
fn build_go(go: &Path, dir: &Path) -> PathBuf {
    let gofmt = std::fs::canonicalize(go)
        .unwrap_or_else(|_| go.to_path_buf())
        .with_file_name("gofmt");
    let listed = Command::new(&gofmt)
        .args(["-l", "."])
        .current_dir(examples().join("go"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} ({e}): it comes with Go", gofmt.display()));
    assert!(
        listed.status.success() && listed.stdout.is_empty(),
        "examples/clients/go is not gofmt-clean (run `gofmt -w examples/clients/go`): {}{}",
        String::from_utf8_lossy(&listed.stdout),
        String::from_utf8_lossy(&listed.stderr)
    );
    let out = dir.join("leader-go");
    let result = Command::new(go)
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(examples().join("go"))
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("CGO_ENABLED", "0")
        .output()
        .expect("run go build");
    assert!(
        result.status.success(),
        "go build of examples/clients/go failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

/// Node 18 is the first with a global `fetch`.
fn check_node_version(node: &Path) {
    let out = Command::new(node)
        .arg("--version")
        .output()
        .expect("run node --version");
    let v = String::from_utf8_lossy(&out.stdout);
    let major: u32 = v
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    assert!(
        major >= 18,
        "node {} is too old: the Node snippet uses the built-in fetch (Node 18 or newer). \
         Install a newer one with `sudo apt-get install -y nodejs` on Debian 12 or later",
        v.trim()
    );
}

/// One line a snippet printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    /// `leader=true token=T` (`Some(T)`) or `leader=false token=none` (`None`).
    Leader(Option<u64>),
    /// `write token=T n=K`.
    Write(u64),
}

/// Parse one output line; `None` for anything outside the snippets' line format.
fn parse(line: &str) -> Option<Said> {
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let field = |w: Option<&str>, key: &str| {
        w.and_then(|w| w.strip_prefix(key))
            .and_then(|w| w.strip_prefix('='))
            .map(str::to_string)
    };
    let said = if first == "write" {
        let token = field(words.next(), "token")?.parse().ok()?;
        field(words.next(), "n")?.parse::<u64>().ok()?;
        Said::Write(token)
    } else {
        let leader = field(Some(first), "leader")?;
        let token = field(words.next(), "token")?;
        match (leader.as_str(), token.as_str()) {
            ("false", "none") => Said::Leader(None),
            ("true", t) => Said::Leader(Some(t.parse().ok()?)),
            _ => return None,
        }
    };
    words.next().is_none().then_some(said)
}

/// One snippet process and what it has printed so far.
struct Snippet {
    name: String,
    mode: &'static str,
    child: Child,
    /// Every stdout line with the moment it was read.
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
    stderr: PathBuf,
}

impl Snippet {
    fn start(lang: &str, mode: &'static str, argv: &[&Path], url: &str, dir: &Path) -> Snippet {
        use std::os::unix::process::CommandExt;
        let name = format!("{lang} {mode}");
        let stderr = dir.join(format!("{lang}-{mode}.stderr"));
        let mut child = Command::new(argv[0])
            .args(&argv[1..])
            .arg(mode)
            .env("REDLOCK_ELECTOR_URL", url)
            .current_dir(examples())
            // Its own process group, so the end of the test also ends its curl and sleep children.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("create the stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {name} snippet ({argv:?}): {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().expect("piped stdout");
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push((Instant::now(), line));
            }
        });
        Snippet {
            name,
            mode,
            child,
            lines,
            stderr,
        }
    }

    fn said(&self) -> Vec<(Instant, Said)> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|(at, l)| {
                let said = parse(l).unwrap_or_else(|| {
                    panic!(
                        "the {} snippet printed a line outside its format: {l:?}\n{}",
                        self.name,
                        self.output()
                    )
                });
                (*at, said)
            })
            .collect()
    }

    /// The leadership lines, in order, with when each was read.
    fn leadership(&self) -> Vec<(Instant, Option<u64>)> {
        self.said()
            .into_iter()
            .filter_map(|(at, s)| match s {
                Said::Leader(t) => Some((at, t)),
                Said::Write(_) => None,
            })
            .collect()
    }

    /// When the last leadership line says `want` (and, in `work` mode while leading, two writes
    /// have followed it): the moment it was read.
    fn reached(&self, want: Option<u64>) -> Option<Instant> {
        let said = self.said();
        let last = said
            .iter()
            .rposition(|(_, s)| matches!(s, Said::Leader(_)))?;
        let (at, Said::Leader(now)) = said[last] else {
            unreachable!()
        };
        let writes = said.len() - last - 1;
        (now == want && (self.mode != "work" || want.is_none() || writes >= 2)).then_some(at)
    }

    fn output(&self) -> String {
        let out: Vec<String> = self
            .lines
            .lock()
            .unwrap()
            .iter()
            .map(|(_, l)| l.clone())
            .collect();
        format!(
            "--- {} stdout:\n{}\n--- {} stderr:\n{}",
            self.name,
            out.join("\n"),
            self.name,
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }
}

impl Drop for Snippet {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until every snippet's last leadership line says `want`; returns how long each took from
/// `since` (by the moment its line was read), or panics with every snippet's output.
fn all_reach(
    snippets: &[Snippet],
    want: Option<u64>,
    since: Instant,
    limit: Duration,
    what: &str,
    sidecars: &[&Sidecar],
) -> Vec<(String, Duration)> {
    let done = wait_for(limit, Duration::from_millis(20), || {
        snippets
            .iter()
            .map(|s| {
                s.reached(want)
                    .map(|at| (s.name.clone(), at.saturating_duration_since(since)))
            })
            .collect::<Option<Vec<_>>>()
    });
    done.unwrap_or_else(|| {
        let late: Vec<&str> = snippets
            .iter()
            .filter(|s| s.reached(want).is_none())
            .map(|s| s.name.as_str())
            .collect();
        let outputs: Vec<String> = snippets.iter().map(Snippet::output).collect();
        let logs: Vec<String> = sidecars
            .iter()
            .map(|s| format!("--- sidecar {} log:\n{}", s.identity, s.logs()))
            .collect();
        panic!(
            "{what}: within {limit:?}, {late:?} did not print `{}`\n{}\n{}",
            match want {
                Some(t) => format!("leader=true token={t}"),
                None => "leader=false token=none".into(),
            },
            outputs.join("\n"),
            logs.join("\n")
        )
    })
}

fn figures(what: &str, took: &[(String, Duration)]) {
    let list: Vec<String> = took
        .iter()
        .map(|(n, d)| format!("{n} {}", d.as_millis()))
        .collect();
    report(what, list.join(", "));
}

/// Wait until `s` leads; its token.
fn leads(s: &Sidecar, limit: Duration, pair: &[&Sidecar]) -> u64 {
    wait_for(limit, Duration::from_millis(5), || {
        s.try_leader().filter(|v| v.is_leader)?.fencing_token
    })
    .unwrap_or_else(|| {
        let states: Vec<String> = pair
            .iter()
            .map(|p| format!("--- {}: {:?}\n{}", p.identity, p.try_leader(), p.logs()))
            .collect();
        panic!(
            "{} did not lead within {limit:?}:\n{}",
            s.identity,
            states.join("\n")
        )
    })
}

fn step_down(s: &Sidecar) {
    let (status, body) =
        http("POST", s.api_port, "/leader/step-down").expect("POST /leader/step-down");
    assert_eq!(
        status,
        200,
        "step-down of the leader {}: {body}\n{}",
        s.identity,
        s.logs()
    );
}

/// The runtimes every snippet needs, checked, with the Go snippet built into `dir` in the
/// background: bash, python3, node, and the Go build's thread.
struct Runtimes {
    bash: PathBuf,
    python: PathBuf,
    node: PathBuf,
    go_build: std::thread::JoinHandle<PathBuf>,
}

impl Runtimes {
    fn check(dir: &Path) -> Runtimes {
        let bash = program(
            "bash",
            &[],
            "Install it with `sudo apt-get install -y bash`",
        );
        program(
            "curl",
            &[],
            "Install it with `sudo apt-get install -y curl`",
        );
        program("jq", &[], "Install it with `sudo apt-get install -y jq`");
        let python = program(
            "python3",
            &[],
            "Install it with `sudo apt-get install -y python3`",
        );
        let node = program(
            "node",
            &[],
            "Install it with `sudo apt-get install -y nodejs`",
        );
        check_node_version(&node);
        let go = program(
            "go",
            &["/usr/local/go/bin"],
            "Install Go 1.21 or newer from https://go.dev/dl/ into /usr/local/go",
        );
        // The Go build overlaps the Redis servers' start-up quarantine.
        let go_build = {
            let dir = dir.to_path_buf();
            std::thread::spawn(move || build_go(&go, &dir))
        };
        Runtimes {
            bash,
            python,
            node,
            go_build,
        }
    }
}

#[test]
fn client_snippets_follow_leadership_through_handovers() {
    let t_start = Instant::now();
    let dir = tempdir();
    let rt = Runtimes::check(dir.path());
    let (bash, python, node, go_build) = (rt.bash, rt.python, rt.node, rt.go_build);

    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let o = Opts {
        ttl: "2s",
        timeout: "100ms",
        ..Opts::default()
    };
    let pair = [
        Sidecar::start("a", &refs, &o),
        Sidecar::start("b", &refs, &o),
    ];
    let both: Vec<&Sidecar> = pair.iter().collect();
    let l = wait_for(Duration::from_secs(15), Duration::from_millis(10), || {
        sole_leader(&both)
    })
    .unwrap_or_else(|| panic!("no sole leader of the pair within 15s"));
    let (other, mine) = (&pair[l], &pair[1 - l]);
    mine.wait_eligible(Duration::from_secs(15));
    let go_bin = go_build
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    let t_ready = Instant::now();

    let (sh, py, js) = (
        examples().join("shell/leader.sh"),
        examples().join("python/leader.py"),
        examples().join("node/leader.mjs"),
    );
    let langs: [(&str, Vec<&Path>); 4] = [
        ("shell", vec![&bash, &sh]),
        ("python", vec![&python, &py]),
        ("go", vec![&go_bin]),
        ("node", vec![&node, &js]),
    ];
    let url = mine.url("");
    let snippets: Vec<Snippet> = langs
        .iter()
        .flat_map(|(lang, argv)| {
            MODES.map(|mode| Snippet::start(lang, mode, argv, &url, dir.path()))
        })
        .collect();

    // 1. The other sidecar leads.
    let t0 = Instant::now();
    let took = all_reach(&snippets, None, t0, Duration::from_secs(20), "start", &both);
    figures(
        "client snippets: first `leader=false` after start, ms",
        &took,
    );

    // 2. A graceful handover to mine.
    let t0 = Instant::now();
    step_down(other);
    let t1 = leads(mine, Duration::from_secs(10), &both);
    let took = all_reach(
        &snippets,
        Some(t1),
        t0,
        Duration::from_secs(10),
        "after the other's step-down",
        &both,
    );
    figures(
        "client snippets: `leader=true` after the other's step-down, ms",
        &took,
    );

    // 3. Mine freezes: no answer at all. Each snippet must give the lease up by itself.
    let t0 = Instant::now();
    mine.signal("STOP");
    let took = all_reach(
        &snippets,
        None,
        t0,
        TTL + Duration::from_secs(5),
        "mine frozen",
        &both,
    );
    figures(
        "client snippets: `leader=false` after mine froze (lease ttl 2s), ms",
        &took,
    );
    leads(other, TTL * 3, &both);
    mine.signal("CONT");

    // 4. A graceful handover back: a new term, a larger token. Mine must contend again first:
    // after the pause its loop reports a stall (/healthz 503, no contending) for about a second,
    // and it watches the nodes' clocks afresh; `eligible` read before that is stale.
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        (http("GET", mine.ops_port, "/healthz")?.0 == 200).then_some(())
    })
    .unwrap_or_else(|| panic!("mine did not recover from the pause:\n{}", mine.logs()));
    mine.wait_eligible(Duration::from_secs(15));
    let t0 = Instant::now();
    step_down(other);
    let t2 = leads(mine, Duration::from_secs(10), &both);
    assert!(
        t2 > t1,
        "the fencing token did not increase: {t1} then {t2}"
    );
    let took = all_reach(
        &snippets,
        Some(t2),
        t0,
        Duration::from_secs(10),
        "after the second step-down",
        &both,
    );
    figures(
        "client snippets: `leader=true` after the second step-down, ms",
        &took,
    );

    // Each whole output tells exactly that story.
    for s in &snippets {
        let said = s.said();
        let told: Vec<Option<u64>> = s.leadership().into_iter().map(|(_, t)| t).collect();
        assert_eq!(
            told,
            [None, Some(t1), None, Some(t2)],
            "the {} snippet's leadership lines\n{}",
            s.name,
            s.output()
        );
        let mut term = None;
        let mut writes = 0;
        for (_, line) in said {
            match line {
                Said::Leader(t) => term = t,
                Said::Write(token) => {
                    writes += 1;
                    assert_eq!(s.mode, "work", "{} wrote:\n{}", s.name, s.output());
                    assert_eq!(
                        Some(token),
                        term,
                        "the {} snippet wrote with token {token} while its term was {term:?}\n{}",
                        s.name,
                        s.output()
                    );
                }
            }
        }
        if s.mode == "work" {
            assert!(
                writes >= 4,
                "{} wrote {writes} times:\n{}",
                s.name,
                s.output()
            );
        }
    }
    report(
        "client snippets: test wall time (setup until the pair was ready / snippets' run), s",
        format!(
            "{:.1} / {:.1}",
            (t_ready - t_start).as_secs_f64(),
            t_ready.elapsed().as_secs_f64()
        ),
    );
}

/// The three leases of [`client_snippets_follow_several_leases`], in config order.
const LEASES: [&str; 3] = ["alpha", "beta", "gamma"];

/// A set of led leases with their tokens, in config order (as the snippets print it).
type Owned = Vec<(String, u64)>;

/// Parse a `leases=` line: `leases=none`, or `leases=alpha:7,gamma:3`.
fn parse_leases(line: &str) -> Option<Owned> {
    let rest = line.strip_prefix("leases=")?;
    if rest == "none" {
        return Some(Vec::new());
    }
    rest.split(',')
        .map(|p| {
            let (name, token) = p.split_once(':')?;
            Some((name.to_string(), token.parse().ok()?))
        })
        .collect()
}

fn show_owned(o: &Owned) -> String {
    if o.is_empty() {
        return "leases=none".into();
    }
    let parts: Vec<String> = o.iter().map(|(n, t)| format!("{n}:{t}")).collect();
    format!("leases={}", parts.join(","))
}

/// The leases `s` leads now, with their tokens, by its `GET /leases`.
fn owned(s: &Sidecar) -> Option<Owned> {
    let (status, body) = http("GET", s.api_port, "/leases")?;
    if status != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["leases"]
        .as_array()?
        .iter()
        .filter(|l| l["is_leader"] == true)
        .map(|l| {
            Some((
                l["lease"].as_str()?.to_string(),
                l["fencing_token"].as_u64()?,
            ))
        })
        .collect()
}

impl Snippet {
    /// The `leases=` lines, in order, with when each was read; a panic on any other line.
    fn owned_lines(&self) -> Vec<(Instant, Owned)> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|(at, l)| {
                let o = parse_leases(l).unwrap_or_else(|| {
                    panic!(
                        "the {} snippet printed a line outside its format: {l:?}\n{}",
                        self.name,
                        self.output()
                    )
                });
                (*at, o)
            })
            .collect()
    }
}

/// Wait until every snippet's last line says `want`; returns how long each took from `since`.
fn all_own(
    snippets: &[Snippet],
    want: &Owned,
    since: Instant,
    limit: Duration,
    what: &str,
    sidecars: &[&Sidecar],
) -> Vec<(String, Duration)> {
    let reached = |s: &Snippet| {
        s.owned_lines()
            .last()
            .filter(|(_, o)| o == want)
            .map(|(at, _)| at.saturating_duration_since(since))
    };
    wait_for(limit, Duration::from_millis(20), || {
        snippets
            .iter()
            .map(|s| reached(s).map(|d| (s.name.clone(), d)))
            .collect::<Option<Vec<_>>>()
    })
    .unwrap_or_else(|| {
        let outputs: Vec<String> = snippets.iter().map(Snippet::output).collect();
        let logs: Vec<String> = sidecars
            .iter()
            .map(|s| format!("--- sidecar {} log:\n{}", s.identity, s.logs()))
            .collect();
        panic!(
            "{what}: within {limit:?}, not every snippet printed `{}`\n{}\n{}",
            show_owned(want),
            outputs.join("\n"),
            logs.join("\n")
        )
    })
}

fn step_down_lease(s: &Sidecar, lease: &str) {
    let path = format!("/leases/{lease}/step-down");
    let (status, body) = http("POST", s.api_port, &path).expect("POST /leases/{name}/step-down");
    assert_eq!(
        status,
        200,
        "{path} on {}: {body}\n{}",
        s.identity,
        s.logs()
    );
}

/// Every snippet's `leases` mode (one long-poll connection to `GET /leases` at a time) against
/// one sidecar, "mine", of a pair on three real Redis servers, both with the leases alpha, beta
/// and gamma. The other sidecar starts first and leads all three.
/// 1. each snippet prints `leases=none`;
/// 2. the other steps down from alpha (`POST /leases/alpha/step-down`): mine takes it, and each
///    prints `leases=alpha:T` with mine's token;
/// 3. the other steps down from beta and gamma: each prints all three with mine's tokens;
/// 4. mine steps down from beta (the other takes it): each prints alpha and gamma;
/// 5. mine is stopped with SIGTERM: each prints `leases=none`.
///
/// Each output must be exactly that story (between alpha alone and all three, one more line with
/// two of them is allowed: the two step-downs are two changes), every token the sidecar's.
#[test]
fn client_snippets_follow_several_leases() {
    let t_start = Instant::now();
    let dir = tempdir();
    let rt = Runtimes::check(dir.path());
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let mut extra = Vec::new();
    for l in LEASES {
        extra.extend(["--leases".to_string(), l.to_string()]);
    }
    let o = Opts {
        lease: String::new(),
        ttl: "2s",
        timeout: "100ms",
        extra,
        ..Opts::default()
    };
    // The other first: it leads all three before mine starts.
    let other = Sidecar::start("b", &refs, &o);
    wait_for(Duration::from_secs(15), Duration::from_millis(10), || {
        owned(&other).filter(|o| o.len() == LEASES.len())
    })
    .unwrap_or_else(|| panic!("b did not lead every lease within 15s:\n{}", other.logs()));
    let mut pair = [Sidecar::start("a", &refs, &o), other];
    for s in &pair {
        s.wait_eligible(Duration::from_secs(15));
    }
    let go_bin = rt
        .go_build
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    let t_ready = Instant::now();
    let (sh, py, js) = (
        examples().join("shell/leader.sh"),
        examples().join("python/leader.py"),
        examples().join("node/leader.mjs"),
    );
    let langs: [(&str, Vec<&Path>); 4] = [
        ("shell", vec![&rt.bash, &sh]),
        ("python", vec![&rt.python, &py]),
        ("go", vec![&go_bin]),
        ("node", vec![&rt.node, &js]),
    ];
    let url = pair[0].url("");
    let snippets: Vec<Snippet> = langs
        .iter()
        .map(|(lang, argv)| Snippet::start(lang, "leases", argv, &url, dir.path()))
        .collect();
    let alpha;
    let all_three;
    let alpha_gamma;
    {
        let (mine, other) = (&pair[0], &pair[1]);
        let both = [mine, other];
        // 1. Mine leads none.
        let t0 = Instant::now();
        let took = all_own(
            &snippets,
            &Vec::new(),
            t0,
            Duration::from_secs(20),
            "start",
            &both,
        );
        figures(
            "client snippets, leases: first `leases=none` after start, ms",
            &took,
        );
        // 2. The other steps down from alpha: mine, the only other candidate, is named and
        // takes it.
        let t0 = Instant::now();
        step_down_lease(other, "alpha");
        alpha = wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
            owned(mine).filter(|o| !o.is_empty())
        })
        .unwrap_or_else(|| panic!("mine did not take alpha:\n{}", mine.logs()));
        assert_eq!(
            alpha.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["alpha"]
        );
        let took = all_own(
            &snippets,
            &alpha,
            t0,
            Duration::from_secs(10),
            "after the other's step-down of alpha",
            &both,
        );
        figures(
            "client snippets, leases: alpha after the other's step-down of it, ms",
            &took,
        );
        // 3. The other steps down from beta and gamma: mine takes both.
        let t0 = Instant::now();
        step_down_lease(other, "beta");
        step_down_lease(other, "gamma");
        all_three = wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
            owned(mine).filter(|o| o.len() == LEASES.len())
        })
        .unwrap_or_else(|| panic!("mine did not take every lease:\n{}", mine.logs()));
        assert!(all_three.contains(&alpha[0]), "mine's alpha term changed");
        let took = all_own(
            &snippets,
            &all_three,
            t0,
            Duration::from_secs(10),
            "after the other's step-downs",
            &both,
        );
        figures(
            "client snippets, leases: all three after the other's step-downs of beta and gamma, ms",
            &took,
        );
        // 3. Mine steps down from beta, once the other's cool-down after its own step-downs
        // (one ttl) has passed: the other takes beta, mine keeps alpha and gamma.
        std::thread::sleep(TTL);
        let t0 = Instant::now();
        step_down_lease(mine, "beta");
        alpha_gamma = all_three
            .iter()
            .filter(|(n, _)| n != "beta")
            .cloned()
            .collect::<Owned>();
        wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
            (owned(mine)? == alpha_gamma && owned(other)?.iter().any(|(n, _)| n == "beta"))
                .then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "beta did not move to the other:\n{}\n{}",
                mine.logs(),
                other.logs()
            )
        });
        let took = all_own(
            &snippets,
            &alpha_gamma,
            t0,
            Duration::from_secs(10),
            "after mine's step-down of beta",
            &both,
        );
        figures(
            "client snippets, leases: alpha and gamma after mine's step-down of beta, ms",
            &took,
        );
    }
    // 4. SIGTERM of mine: it releases both leases and exits; each snippet prints none.
    let t0 = Instant::now();
    let (code, took_exit) = pair[0].terminate();
    assert_eq!(
        code,
        Some(0),
        "mine's exit after SIGTERM:\n{}",
        pair[0].logs()
    );
    let both = [&pair[0], &pair[1]];
    let took = all_own(
        &snippets,
        &Vec::new(),
        t0,
        TTL + Duration::from_secs(2),
        "after mine's SIGTERM",
        &both,
    );
    figures(
        &format!(
            "client snippets, leases: `leases=none` after mine's SIGTERM (it exited in {} ms), ms",
            took_exit.as_millis()
        ),
        &took,
    );
    // Each whole output tells exactly that story.
    for s in &snippets {
        let told: Vec<Owned> = s.owned_lines().into_iter().map(|(_, o)| o).collect();
        let at_all = told
            .iter()
            .position(|o| *o == all_three)
            .unwrap_or_else(|| panic!("{} never printed all three:\n{}", s.name, s.output()));
        // At mine's SIGTERM its two leases end one after the other (each elector releases its
        // own), so a snippet may see one of them end first: at most one line with alpha or
        // gamma alone between the two and none.
        let after = &told[at_all..];
        let one_ended_first = |o: &Owned| o.len() == 1 && alpha_gamma.contains(&o[0]);
        assert!(
            after.len() >= 3
                && after[..2] == [all_three.clone(), alpha_gamma.clone()]
                && after[after.len() - 1].is_empty()
                && after.len() <= 4
                && after[2..after.len() - 1].iter().all(one_ended_first),
            "the {} snippet's lines after all three: {after:?}\n{}",
            s.name,
            s.output()
        );
        assert_eq!(
            told[..2],
            [Vec::new(), alpha.clone()],
            "the {} snippet's first lines\n{}",
            s.name,
            s.output()
        );
        // Between alpha alone and all three, at most one line with two of them.
        let between = &told[1..=at_all];
        assert!(
            between.len() <= 3
                && between
                    .windows(2)
                    .all(|w| w[0].iter().all(|p| w[1].contains(p)) && w[0].len() < w[1].len()),
            "the {} snippet's lines from alpha to all three: {between:?}\n{}",
            s.name,
            s.output()
        );
    }
    report(
        "client snippets, leases: test wall time (setup until the pair was ready / snippets' run), s",
        format!(
            "{:.1} / {:.1}",
            (t_ready - t_start).as_secs_f64(),
            t_ready.elapsed().as_secs_f64()
        ),
    );
}
