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

#[test]
fn client_snippets_follow_leadership_through_handovers() {
    let t_start = Instant::now();
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
    let dir = tempdir();
    // The Go build overlaps the Redis servers' start-up quarantine.
    let go_build = {
        let dir = dir.path().to_path_buf();
        std::thread::spawn(move || build_go(&go, &dir))
    };

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
