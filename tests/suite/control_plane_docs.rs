//! The docs are the test (issue 35): the install routes run on the real node **from the text of
//! the page that documents them**. Each command block and values file a route uses carries a
//! marker, `<!-- docs-test: NAME -->`, on the line before its fence; the test reads the block
//! from the Markdown, makes only the substitutions listed next to each (the user's registry and
//! Redis addresses become the test's), asserts each substitution found its text, and runs the
//! commands with the cluster's own `helm` and `kubectl` on the PATH. A page whose command or
//! values drift fails here.
//!
//! "A request through the leader Service" is sent from another pod's app container (its own
//! root, resolv.conf and busybox `wget`) to the Service's DNS name: the node's CoreDNS resolves
//! it to the ClusterIP, and the node's kube-proxy routes that to the leader pod.
//!
//! Mapped, not run as written, because this machine has no kind cluster and reaches no registry
//! (the README's push to a registry, `readme-push`, runs as written against a loopback one):
//! - `kind load image-archive FILE` imports FILE into the node's containerd (what kind does);
//! - the Redis endpoints of the values become the host's redis-servers, through the node's
//!   forwarder (except in `manifests/example`, which runs its own Redis pods);
//! - the Docker Hub images `manifests/example` names (`busybox:1.36`, `redis:7.2-alpine`) are
//!   built here and imported under those names ([`library_images`]): the host's static busybox,
//!   and the host's `redis-server` with its shared libraries.

use super::*;

use k8s_openapi::api::core::v1::Service;
use std::path::PathBuf;
use std::process::Command;

/// The fenced block after `<!-- docs-test: NAME -->` in `page` (a path from the repository's
/// root), without its fences.
fn documented(page: &str, name: &str) -> String {
    let text = std::fs::read_to_string(cluster::repo().join(page))
        .unwrap_or_else(|e| panic!("cannot read {page}: {e}"));
    let marker = format!("<!-- docs-test: {name} -->");
    let after = text
        .split_once(&marker)
        .unwrap_or_else(|| panic!("{page} has no `{marker}`: the docs test runs that block"))
        .1;
    let mut lines = after.lines().skip_while(|l| l.trim().is_empty());
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "{page}: `{marker}` is not followed by a fenced block but by {fence:?}"
    );
    let block: Vec<&str> = lines.take_while(|l| !l.starts_with("```")).collect();
    block.join("\n") + "\n"
}

/// `text` with `from` replaced by `to`; fails when the page no longer says `from` (so the
/// substitution cannot silently stop applying).
fn swap(text: &str, from: &str, to: &str, what: &str) -> String {
    assert!(
        text.contains(from),
        "the documented {what} no longer contains {from:?}:\n{text}"
    );
    text.replace(from, to)
}

/// `text` with each of the page's Redis URLs `documented(i)` (i = 0, 1, 2) replaced by the
/// test's `endpoints[i]` (see [`swap`]).
fn with_endpoints(
    text: &str,
    documented: impl Fn(usize) -> String,
    endpoints: &[String],
    what: &str,
) -> String {
    endpoints
        .iter()
        .enumerate()
        .fold(text.to_string(), |t, (i, ep)| {
            swap(&t, &documented(i), ep, what)
        })
}

/// The commands of a shell block: its lines without comments and blank lines, a line ending in
/// `\\` joined with the next.
fn commands(block: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        let line = line.split(" #").next().unwrap().trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => out.push(std::mem::take(&mut pending) + line),
        }
    }
    assert!(
        pending.is_empty(),
        "a command ends in \\ at the block's end"
    );
    out
}

/// Where the documented commands run: the checkout's root, as for a user in a clone. The user's
/// files the pages have them write there (`my-values.yaml`) are removed on drop (and ignored
/// by git meanwhile).
struct Workdir {
    files: Vec<PathBuf>,
    /// Variables the commands see besides the cluster's (a workflow's `env:`).
    env: Vec<(String, String)>,
}

impl Workdir {
    fn new() -> Workdir {
        Workdir {
            files: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Write a user's file, as the page names it, in the checkout's root.
    fn write(&mut self, name: &str, text: &str) {
        let path = self.path().join(name);
        std::fs::write(&path, text).unwrap();
        self.files.push(path);
    }

    fn path(&self) -> PathBuf {
        cluster::repo()
    }

    /// Run one documented command line with `sh -c`, the cluster's helm and kubectl first on the
    /// PATH; its stdout. Fails with the command's output.
    fn run(&self, cp: &ControlPlane, line: &str) -> String {
        self.run_in(cp, line, &self.path())
    }

    /// `sh -c line` in `dir`, as a user of the cluster would run it: its kubectl and helm first
    /// on the PATH, its kubeconfig, a helm home of its own, and this workdir's variables.
    fn sh(&self, cp: &ControlPlane, line: &str, dir: &std::path::Path) -> Command {
        let path = format!(
            "{}:{}",
            cp.bin("kubectl").parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let helm_home = cp.dir.join("helm");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", line])
            .current_dir(dir)
            .env("PATH", path)
            .env("KUBECONFIG", &cp.kubeconfig)
            .env("HELM_CACHE_HOME", helm_home.join("cache"))
            .env("HELM_CONFIG_HOME", helm_home.join("config"))
            .env("HELM_DATA_HOME", helm_home.join("data"))
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// [`Workdir::run`] in `dir`.
    fn run_in(&self, cp: &ControlPlane, line: &str, dir: &std::path::Path) -> String {
        let out = self
            .sh(cp, line, dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run sh -c {line:?}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "the documented command failed ({}): {line}\n{stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        report(
            &format!("docs: ran `{line}`"),
            stdout.trim_end().to_string(),
        );
        stdout
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The stand-in for "your app's image": a static busybox that serves `hello from POD` over HTTP
/// on 8080, and declares no ports (as most images do not). `localhost/redlock-elector/hello:1`,
/// imported into the node.
fn hello_image(cp: &ControlPlane) -> (&'static str, &'static str) {
    let (repo, tag) = ("localhost/redlock-elector/hello", "1");
    let dir = tempdir();
    let tar = dir.path().join("hello.oci.tar");
    let script = "trap 'exit 0' TERM; mkdir -p /www; echo \"hello from $(hostname)\" > /www/index.html; \
                  httpd -f -p 8080 -h /www & wait";
    let mut entries = vec!["/bin/busybox=/bin/busybox".to_string()];
    entries.extend(
        ["sh", "mkdir", "echo", "hostname", "httpd", "wget"].map(|a| format!("/bin/{a}->busybox")),
    );
    oci_image(
        &tar,
        &format!("{repo}:{tag}"),
        &["/bin/sh", "-c", script],
        &entries,
    );
    cp.import_image(&tar);
    (repo, tag)
}

/// The Docker Hub images `manifests/example` names, built here from the host's programs and
/// imported under those names (this machine reaches no image registry): `busybox:1.36` is the
/// host's static busybox with every applet linked, `redis:7.2-alpine` the host's `redis-server`
/// with the shared libraries `ldd` lists (Debian's Redis 7, not Alpine's build of 7.2).
fn library_images(cp: &ControlPlane) {
    let dir = tempdir();
    let list = Command::new("/bin/busybox")
        .arg("--list")
        .output()
        .expect("run /bin/busybox --list (Debian package busybox-static)");
    let mut entries = vec!["/bin/busybox=/bin/busybox".to_string()];
    entries.extend(
        String::from_utf8_lossy(&list.stdout)
            .lines()
            .filter(|a| *a != "busybox")
            .map(|a| format!("/bin/{a}->busybox")),
    );
    let busybox = dir.path().join("busybox.oci.tar");
    oci_image(&busybox, "docker.io/library/busybox:1.36", &[], &entries);
    cp.import_image(&busybox);

    let found = Command::new("sh")
        .args(["-c", "command -v redis-server"])
        .output()
        .expect("run sh");
    let server = std::fs::canonicalize(String::from_utf8_lossy(&found.stdout).trim())
        .expect("redis-server is on the PATH (Debian package redis-server)");
    let ldd = Command::new("ldd").arg(&server).output().expect("run ldd");
    assert!(ldd.status.success(), "ldd {}: {:?}", server.display(), ldd);
    let mut files = vec![format!("{}=/usr/bin/redis-server", server.display())];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // `libssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x...)`, `/lib64/ld-linux-x86-64.so.2 (0x...)`
        let path = line
            .split("=>")
            .last()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap_or("");
        if path.starts_with('/') {
            files.push(format!("{path}={path}"));
        }
    }
    let redis = dir.path().join("redis.oci.tar");
    oci_image(&redis, "docker.io/library/redis:7.2-alpine", &[], &files);
    cp.import_image(&redis);
}

/// `scripts/node/oci-image.py OUT REF [--entrypoint=ARG]... ENTRY...`: an image of `entries`
/// (`SRC=DEST` files and `LINK->TARGET` links); with no `entrypoint`, the pods give commands.
fn oci_image(out: &std::path::Path, reference: &str, entrypoint: &[&str], entries: &[String]) {
    let status = Command::new("python3")
        .arg(cluster::repo().join("scripts/node/oci-image.py"))
        .arg(out)
        .arg(reference)
        .args(entrypoint.iter().map(|a| format!("--entrypoint={a}")))
        .args(entries)
        .status()
        .expect("run scripts/node/oci-image.py");
    assert!(status.success(), "oci-image.py of {reference} failed");
}

impl RealNode {
    /// The leader Service's DNS name and port, and its ClusterIP.
    fn leader_service(&self) -> (String, i32, String) {
        let api: Api<Service> = Api::namespaced(self.cp.client.clone(), &self.ns);
        let svc = self
            .cp
            .block_on(api.get(&self.service))
            .unwrap_or_else(|e| panic!("no leader Service {}/{}: {e}", self.ns, self.service));
        let spec = svc.spec.expect("the leader Service has a spec");
        let port = spec.ports.iter().flatten().map(|p| p.port).next();
        (
            format!("{}.{}.svc.cluster.local", self.service, self.ns),
            port.expect("the leader Service has a port"),
            spec.cluster_ip.unwrap_or_default(),
        )
    }

    /// The leader Service's ready endpoint: (address, port), once its slice has exactly one.
    fn leader_endpoint(&self) -> Option<(String, i32)> {
        let api: Api<EndpointSlice> = Api::namespaced(self.cp.client.clone(), &self.ns);
        let sel = format!("kubernetes.io/service-name={}", self.service);
        let slices = self
            .cp
            .block_on(api.list(&ListParams::default().labels(&sel)))
            .ok()?
            .items;
        let ports: Vec<i32> = slices
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .filter_map(|p| p.port)
            .collect();
        let addrs = self.leader_slice();
        (addrs.len() == 1 && ports.len() == 1)
            .then(|| (addrs.into_iter().next().unwrap(), ports[0]))
    }

    /// A request through the leader Service, sent from a pod other than `leader`: it must reach
    /// `leader`'s app (the hello app answers with its pod's name). The body.
    /// A request from another pod's app container to the leader Service's DNS name reaches the
    /// leader's app: the hello app's `hello from POD`, or the demo app's copy of its sidecar's
    /// `/leader` answer, whose `identity` is the pod.
    fn request_reaches(&self, leader: &str) -> String {
        let (host, port, cluster_ip) = self.leader_service();
        let mut last = None;
        wait_for(Duration::from_secs(30), Duration::from_millis(200), || {
            let from = self.live().into_iter().find(|p| name(p) != leader)?;
            // The host's `timeout`, not wget's `-T`: Debian's static busybox 1.35 wget crashes
            // with -T.
            let out = Command::new("timeout")
                .args(["3", "nsenter", "-t", &app_pid(&self.cp, &from)?.to_string()])
                .args(["-m", "-n", "-r", "-w", "--", "wget", "-qO-"])
                .arg(format!("http://{host}:{port}/"))
                .output()
                .ok()?;
            let body = String::from_utf8_lossy(&out.stdout).into_owned();
            last = Some(format!("{body}{}", String::from_utf8_lossy(&out.stderr)));
            (body.contains(&format!("hello from {leader}"))
                || body.contains(&format!("\"identity\":\"{leader}\"")))
            .then(|| {
                format!(
                    "{} -> http://{host}:{port}/ (ClusterIP {cluster_ip}) -> {}",
                    name(&from),
                    body.trim()
                )
            })
        })
        .unwrap_or_else(|| {
            panic!(
                "no request through the leader Service http://{host}:{port}/ (ClusterIP \
                 {cluster_ip}) reached {leader}'s app; the Service's endpoint: {:?}; the last \
                 answer: {last:?}",
                self.leader_endpoint()
            )
        })
    }
}

/// The README's `my-values.yaml`, with the hello app for the user's image and the test's Redis.
fn readme_values(node: &RealNode, hello_repo: &str, hello_tag: &str) -> String {
    let mut values = documented("README.md", "readme-values");
    values = swap(&values, "registry.example.com/my-app", hello_repo, "values");
    values = swap(
        &values,
        "tag: \"1.4.2\"",
        &format!("tag: \"{hello_tag}\""),
        "values",
    );
    with_endpoints(
        &values,
        |i| format!("redis://redis-{}.redis:6379", ["a", "b", "c"][i]),
        &node.endpoints,
        "values",
    )
}

/// The README's install route, as written: build the image (`./scripts/image.sh build`), load it
/// (kind's line, mapped to the node's import), `helm install` of the README's `my-values.yaml`
/// (with the hello app, which names no ports, in place of `registry.example.com/my-app`, and the
/// test's Redis), the README's `kubectl get pods`. Then: one leader labelled; a request through
/// the leader Service reaches the leader pod's app; `kubectl delete pod` of the leader moves
/// the leader, the label and the Service's endpoint; the install page's uninstall section leaves
/// no object behind, and in Redis only what it says.
#[test]
fn cp_docs_readme_route_installs_a_leader_the_service_routes_to() {
    let node = RealNode::up();
    let mut work = Workdir::new();
    let (hello_repo, hello_tag) = hello_image(&node.cp);

    // 1. The image, as the README builds and loads it.
    for line in commands(&documented("README.md", "readme-image")) {
        if let Some(archive) = line.strip_prefix("kind load image-archive ") {
            node.cp.import_image(&work.path().join(archive.trim()));
            report("docs: mapped", format!("`{line}` -> ctr images import"));
        } else {
            work.run(&node.cp, &line);
        }
    }

    // 2. The README's values, with the user's image and Redis replaced.
    let values = readme_values(&node, hello_repo, hello_tag);
    work.write("my-values.yaml", &values);

    // 3. helm install and kubectl get, verbatim.
    let install = commands(&documented("README.md", "readme-install"));
    assert!(
        install[0].starts_with("helm install my-app ./charts/redlock-elector -n my-ns"),
        "the README's install command changed: {install:?}"
    );
    let t0 = Instant::now();
    let notes = work.run(&node.cp, &install[0]);
    for line in &install[1..] {
        work.run(&node.cp, line);
    }
    let rn = node.workload(
        "my-ns",
        "app.kubernetes.io/instance=my-app",
        "my-app-redlock-elector-leader",
    );
    // 4. What every route shows, kubectl delete pod of the leader included; then the README's
    // kubectl get, which must show the leader's role.
    let next = rn.route_works("README route (helm install)", 3, t0);
    let listed = work.run(&rn.cp, &install[1]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&next) && l.contains("leader")),
        "the README's kubectl get does not show {next} as leader:\n{listed}"
    );
    // 4b. What the chart's NOTES.txt (helm install's output) tells the user to run.
    rn.notes_commands_work(&work, &notes, &next);

    // 5. The upgrade page's helm upgrade, as written, after a change to the values (a pod
    // annotation, which rolls the pods): every pod replaced, one leader labelled, and the leader
    // Service routes to it.
    let before: BTreeSet<String> = rn.pods().iter().map(name).collect();
    work.write(
        "my-values.yaml",
        &swap(
            &values,
            "workload: { kind: Deployment, replicas: 3 }",
            "workload: { kind: Deployment, replicas: 3, podAnnotations: { upgraded: \"yes\" } }",
            "values",
        ),
    );
    let upgrade = commands(&documented("docs/operating/upgrade.md", "upgrade"));
    let t0 = Instant::now();
    for line in &upgrade {
        work.run(&rn.cp, line);
    }
    wait_for(Duration::from_secs(300), Duration::from_millis(500), || {
        let now: BTreeSet<String> = rn.pods().iter().map(name).collect();
        now.is_disjoint(&before).then_some(())
    })
    .expect("the documented helm upgrade did not replace every pod");
    rn.leads_and_routes(
        "the upgrade page's helm upgrade (pods rolled)",
        3,
        Duration::from_secs(60),
        t0,
    );

    // 6. The install page's uninstall section, as written.
    for line in commands(&documented("docs/operating/install.md", "uninstall")) {
        work.run(&rn.cp, &line);
    }
    rn.nothing_left("the install page's uninstall");
    // What stays in Redis: each key's name and whether it expires, on every node, against the
    // page's list of what an uninstall leaves.
    let page = std::fs::read_to_string(cluster::repo().join("docs/operating/install.md")).unwrap();
    let redis_cli = |port: u16, args: &[&str]| {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for r in &rn._redis {
        let keys = redis_cli(r.port, &["--scan"]);
        for key in keys.lines().filter(|k| !k.is_empty()) {
            let pttl = redis_cli(r.port, &["pttl", key]);
            report(
                &format!("docs: left in Redis on :{}", r.port),
                format!("{key} (pttl {})", pttl.trim()),
            );
            let shown = key.replace("my-app", "LEASE");
            assert!(
                page.contains(&format!("`{shown}`")),
                "the uninstall section does not name `{shown}`, which the uninstall left in Redis"
            );
        }
    }
}

/// A plain Deployment (`kind: Deployment`) or StatefulSet of the hello app, 2 replicas, with the
/// container port named `http` that the pages tell the user to declare.
fn hello_workload(kind: &str, name: &str, image: &str) -> String {
    let service_name = if kind == "StatefulSet" {
        format!("  serviceName: {name}\n")
    } else {
        String::new()
    };
    format!(
        "apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: {name}\n  labels:\n    app: {name}\n\
         spec:\n{service_name}  replicas: 2\n  selector:\n    matchLabels:\n      app: {name}\n  template:\n\
         \x20   metadata:\n      labels:\n        app: {name}\n    spec:\n      containers:\n\
         \x20       - name: {APP}\n          image: {image}\n          imagePullPolicy: Never\n\
         \x20         ports:\n            - name: http\n              containerPort: 8080\n"
    )
}

/// The commands the chart's NOTES.txt tells the user to run: each `kubectl` line, its `\`
/// continuations joined.
fn notes_commands(notes: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for line in notes.lines().map(str::trim) {
        let part = line.trim_end_matches('\\').trim_end();
        match open.as_mut() {
            Some(c) => {
                c.push(' ');
                c.push_str(part);
            }
            None if line.starts_with("kubectl ") => open = Some(part.to_string()),
            None => continue,
        }
        if !line.ends_with('\\') {
            out.extend(open.take());
        }
    }
    out
}

impl RealNode {
    /// The commands of the chart's NOTES.txt (`notes`, as `helm install` printed them) work as
    /// printed, on the real node: `check-config --connect` in a pod (`kubectl exec`) says every
    /// endpoint counts and exits 0; `kubectl port-forward` to the leader Service reaches
    /// `leader`'s app (its local port mapped to a free one: 8080 may be taken on this host).
    fn notes_commands_work(&self, work: &Workdir, notes: &str, leader: &str) {
        let commands = notes_commands(notes);
        let exec = commands
            .iter()
            .find(|c| c.contains(" exec ") && c.contains("check-config --connect"))
            .unwrap_or_else(|| panic!("NOTES.txt names no check-config exec:\n{notes}"));
        let checked = work.run(&self.cp, exec);
        let verdict = checked
            .lines()
            .find(|l| l.starts_with("# quorum:"))
            .unwrap_or_else(|| panic!("check-config printed no quorum verdict:\n{checked}"));
        assert!(
            verdict.contains("3 of 3 endpoints usable"),
            "NOTES.txt's check-config: {verdict}\n{checked}"
        );
        report("docs: NOTES.txt's kubectl exec check-config", verdict);

        let forward = commands
            .iter()
            .find(|c| c.contains(" port-forward "))
            .unwrap_or_else(|| panic!("NOTES.txt names no port-forward:\n{notes}"));
        assert!(
            forward.contains(" 8080:"),
            "NOTES.txt's port-forward: {forward}"
        );
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().unwrap().port()
        };
        let line = forward.replace(" 8080:", &format!(" {port}:"));
        report("docs: mapped", format!("`{forward}` -> local port {port}"));
        let mut child = work
            .sh(&self.cp, &format!("exec {line}"), &work.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start kubectl port-forward");
        let mut answer = None;
        let reached = wait_for(Duration::from_secs(30), Duration::from_millis(300), || {
            let out = Command::new("curl")
                .args(["-s", "--max-time", "3"])
                .arg(format!("http://127.0.0.1:{port}/"))
                .output()
                .ok()?;
            let body = String::from_utf8_lossy(&out.stdout).into_owned();
            answer = Some(body.clone());
            body.contains(&format!("hello from {leader}"))
                .then_some(body)
        });
        let _ = child.kill();
        let out = child
            .wait_with_output()
            .expect("kubectl port-forward's output");
        let body = reached.unwrap_or_else(|| {
            panic!(
                "NOTES.txt's port-forward ({line}) did not reach {leader}'s app; the last \
                 answer: {answer:?}; kubectl said: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        report(
            "docs: NOTES.txt's kubectl port-forward",
            format!("http://127.0.0.1:{port}/ -> {}", body.trim()),
        );
    }

    /// The workload's `replicas` pods settle within `within` with one leader labelled, the
    /// leader Service lists exactly it, and a request through the Service reaches its app
    /// (`t0`: when the route's commands started). The leader's name.
    fn leads_and_routes(
        &self,
        route: &str,
        replicas: usize,
        within: Duration,
        t0: Instant,
    ) -> String {
        let leader = self.settled(replicas, within);
        self.slice_lists_only(&leader, Duration::from_secs(60));
        report(
            &format!("docs: {route} -> one leader labelled, the leader Service lists it"),
            format!("{:?} ({leader})", t0.elapsed()),
        );
        report(
            &format!("docs: {route}, a request through the leader Service"),
            self.request_reaches(&leader),
        );
        leader
    }

    /// After a route's documented removal: nothing of it is left in the namespace but what
    /// every namespace has (`default` ServiceAccount, `kube-root-ca.crt`) and the Secrets the
    /// user made by hand. Waits for the deletions to finish.
    fn nothing_left(&self, what: &str) {
        let kinds =
            "all,configmap,serviceaccount,role,rolebinding,poddisruptionbudget,endpointslice";
        let left = || -> Vec<String> {
            self.cp
                .kubectl(&["get", kinds, "-n", &self.ns, "-o", "name"])
                .lines()
                .filter(|l| !["serviceaccount/default", "configmap/kube-root-ca.crt"].contains(l))
                .map(str::to_string)
                .collect()
        };
        let gone = wait_for(Duration::from_secs(120), Duration::from_millis(500), || {
            left().is_empty().then_some(())
        });
        assert!(
            gone.is_some(),
            "{what} left in namespace {}: {:?}",
            self.ns,
            left()
        );
        report(
            &format!("docs: {what}"),
            format!("nothing left in namespace {}", self.ns),
        );
    }

    /// What every route must show once its documented commands ran (`t0`: when they started):
    /// the workload's `replicas` pods settle with one leader labelled, the leader Service lists
    /// exactly it, a request through the Service reaches its app; then `kubectl delete pod` of
    /// the leader moves the leader, the Service's endpoint and the request to the next pod. The
    /// next leader's name.
    fn route_works(&self, route: &str, replicas: usize, t0: Instant) -> String {
        let leader = self.leads_and_routes(route, replicas, Duration::from_secs(240), t0);
        let t1 = Instant::now();
        self.cp
            .kubectl(&["delete", "pod", "-n", &self.ns, &leader, "--wait=false"]);
        let next = wait_for(Duration::from_secs(90), Duration::from_millis(50), || {
            self.sidecar_leader().filter(|l| *l != leader)
        })
        .unwrap_or_else(|| {
            panic!("{route}: no other pod leads after kubectl delete pod of the leader")
        });
        self.slice_lists_only(&next, Duration::from_secs(60));
        report(
            &format!(
                "docs: {route}, kubectl delete pod of the leader -> the Service lists only the next"
            ),
            format!("{:?} ({leader} -> {next})", t1.elapsed()),
        );
        report(
            &format!("docs: {route}, a request through the leader Service after the move"),
            self.request_reaches(&next),
        );
        next
    }
}

/// The routes for a workload the user already has (docs/operating/existing-workload.md), from
/// the page's text, on the real node:
/// - route 1, the kustomize Component: the page's `config.yaml` (the test's Redis),
///   `select/kustomization.yaml` and `kustomization.yaml` (the remote Component, which needs the
///   first release's tag, named by its path in this checkout, as the page says until then), on a
///   base holding a plain Deployment `web` of the hello app; the page's `kubectl create namespace`
///   and `kubectl apply -k`; then the page's `kubectl delete -k my-overlay`;
/// - route 2, the Helm 4 post-renderer plugin: the page's `helm plugin install` and `helm install
///   shop vendor/shop ... --post-renderer ...`, `vendor/shop` being a stand-in third-party chart
///   with a StatefulSet `shop-db` of the hello app.
///
/// Each: one leader labelled, a request through the leader Service reaches the leader pod's app,
/// and a `kubectl delete pod` of the leader moves the leader, the label and the endpoint.
#[test]
fn cp_docs_existing_workload_routes_run_from_the_page() {
    const PAGE: &str = "docs/operating/existing-workload.md";
    let node = RealNode::up();
    let mut work = Workdir::new();
    let (hello_repo, hello_tag) = hello_image(&node.cp);
    let hello = format!("{hello_repo}:{hello_tag}");
    let reference = &sidecar_image().reference;
    let patch = std::fs::read_to_string(
        cluster::repo().join("manifests/components/sidecar/sidecar-patch.yaml"),
    )
    .unwrap();
    assert!(
        patch.contains(&format!("image: {reference}")),
        "the Component's image is not {reference}, the one imported"
    );
    let eps = node.endpoints.clone();
    let endpoints = move |text: String| {
        with_endpoints(
            &text,
            |i| format!("redis://redis-{i}.redis:6379"),
            &eps,
            "config",
        )
    };

    // Route 1: the overlay as the page lays it out, in the checkout's target/ (so that it can name
    // the checkout's Component by a relative path, as a user's overlay beside a clone would).
    let root = cluster::repo()
        .join("target")
        .join(format!("docs-overlay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let overlay = root.join("my-overlay");
    std::fs::create_dir_all(overlay.join("select")).unwrap();
    let base = |dir: &str, workload: &str| {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(
            root.join(dir).join("deployment.yaml"),
            hello_workload("Deployment", workload, &hello),
        )
        .unwrap();
        std::fs::write(
            root.join(dir).join("kustomization.yaml"),
            "resources: [deployment.yaml]\n",
        )
        .unwrap();
    };
    base("base", "web");
    std::fs::write(
        overlay.join("config.yaml"),
        endpoints(documented(PAGE, "component-config")),
    )
    .unwrap();
    std::fs::write(
        overlay.join("select/kustomization.yaml"),
        documented(PAGE, "component-select"),
    )
    .unwrap();
    let kustomization = swap(
        &documented(PAGE, "component-kustomization"),
        "https://github.com/redlock-elector/redlock-elector//manifests/components/sidecar?ref=v0.1.0",
        "../../../manifests/components/sidecar",
        "kustomization.yaml",
    );
    std::fs::write(overlay.join("kustomization.yaml"), kustomization).unwrap();
    let apply = commands(&documented(PAGE, "component-apply"));
    let t0 = Instant::now();
    for line in &apply {
        work.run_in(&node.cp, line, &root);
    }
    let rn = node.workload("shop", "app=web", "redlock-elector-leader");
    rn.route_works("route 1 (kustomize Component, kubectl apply -k)", 2, t0);

    // A second workload in the same namespace, as the page's section says: worker-overlay is
    // my-overlay with `worker` for `web` (its resources being the worker's manifests), plus the
    // page's renaming patches. Both leaders and both Services then route, each to its own.
    let worker = root.join("worker-overlay");
    std::fs::create_dir_all(worker.join("select")).unwrap();
    base("worker-base", "worker");
    let to_worker = |text: &str, what: &str| swap(text, "web", "worker", what);
    std::fs::write(
        worker.join("config.yaml"),
        to_worker(&endpoints(documented(PAGE, "component-config")), "config"),
    )
    .unwrap();
    std::fs::write(
        worker.join("select/kustomization.yaml"),
        to_worker(&documented(PAGE, "component-select"), "select"),
    )
    .unwrap();
    let worker_kustomization = swap(
        &to_worker(
            &std::fs::read_to_string(overlay.join("kustomization.yaml")).unwrap(),
            "kustomization.yaml",
        ),
        "- ../base ",
        "- ../worker-base ",
        "kustomization.yaml",
    );
    assert!(
        worker_kustomization.trim_end().ends_with("value: worker"),
        "the overlay's kustomization.yaml no longer ends with its patches, so the page's \
         patches cannot be added to them:\n{worker_kustomization}"
    );
    std::fs::write(
        worker.join("kustomization.yaml"),
        worker_kustomization + &documented(PAGE, "component-second-workload"),
    )
    .unwrap();
    let t1 = Instant::now();
    for line in commands(&documented(PAGE, "component-second-apply")) {
        work.run_in(&rn.cp, &line, &root);
    }
    let rn = rn.workload("shop", "app=worker", "worker-elector-leader");
    rn.leads_and_routes(
        "route 1, a second workload in the namespace",
        2,
        Duration::from_secs(180),
        t1,
    );
    let rn = rn.workload("shop", "app=web", "redlock-elector-leader");
    rn.leads_and_routes(
        "route 1, the first workload beside the second",
        2,
        Duration::from_secs(60),
        t1,
    );
    work.run_in(&rn.cp, "kubectl delete -k worker-overlay", &root);

    let page = std::fs::read_to_string(cluster::repo().join(PAGE)).unwrap();
    assert!(
        page.contains("`kubectl delete -k my-overlay`"),
        "the page no longer says how to remove route 1"
    );
    work.run_in(&rn.cp, "kubectl delete -k my-overlay", &root);
    rn.nothing_left("route 1's kubectl delete -k (both overlays)");
    rn.cp.kubectl(&["delete", "namespace", "shop", "--wait"]);

    // Route 1 with a Redis password and TLS: three TLS redis-servers that require a password,
    // the page's Secrets (from files of the password and the CA), its TLS config (the servers
    // are reached by IP here, so the name their certificate carries is added as
    // redis.tls.serverName), the same apply. A leader at all proves the password and the CA
    // reached the sidecar: the servers refuse anything else.
    let pki = Pki::new();
    let password = "docs-route-pw";
    let tls_redis: Vec<Redis> = (0..3)
        .map(|_| Redis::start_tls(&pki, false, &["--requirepass", password]))
        .collect();
    let ports: Vec<u16> = tls_redis.iter().map(|r| r.port).collect();
    let node_ip = rn.cp.forward(&ports);
    std::fs::write(root.join("redis-password"), password).unwrap();
    std::fs::copy(pki.path("ca.crt"), root.join("redis-ca.crt")).unwrap();
    let mut tls_config = swap(
        &documented(PAGE, "component-tls-config"),
        "caFile: /var/run/secrets/redlock-elector/redis-tls-ca/ca.crt",
        "caFile: /var/run/secrets/redlock-elector/redis-tls-ca/ca.crt\n    serverName: redis.test",
        "TLS config",
    );
    let tls_endpoints: Vec<String> = ports
        .iter()
        .map(|port| format!("rediss://{node_ip}:{port}"))
        .collect();
    tls_config = with_endpoints(
        &tls_config,
        |i| format!("rediss://redis-{i}.redis:6380"),
        &tls_endpoints,
        "TLS config",
    );
    std::fs::write(overlay.join("config.yaml"), tls_config).unwrap();
    let t0 = Instant::now();
    work.run_in(&rn.cp, &apply[0], &root);
    for line in commands(&documented(PAGE, "component-secrets")) {
        work.run_in(&rn.cp, &line, &root);
    }
    for line in &apply[1..] {
        work.run_in(&rn.cp, line, &root);
    }
    rn.leads_and_routes(
        "route 1 with the page's password and TLS Secrets",
        2,
        Duration::from_secs(180),
        t0,
    );
    work.run_in(&rn.cp, "kubectl delete -k my-overlay", &root);
    rn.nothing_left("route 1 with TLS, kubectl delete -k");
    let _ = std::fs::remove_dir_all(&root);
    rn.cp.kubectl(&["delete", "namespace", "shop", "--wait"]);
    drop(tls_redis);

    // Route 2: the Helm 4 plugin, run from the checkout's root with the page's config.yaml.
    work.write(
        "config.yaml",
        &endpoints(documented(PAGE, "component-config")),
    );
    let chart = tempdir();
    std::fs::create_dir_all(chart.path().join("templates")).unwrap();
    std::fs::write(
        chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: shop\nversion: 1.0.0\n",
    )
    .unwrap();
    std::fs::write(
        chart.path().join("templates/workloads.yaml"),
        hello_workload("StatefulSet", "{{ .Release.Name }}-db", &hello),
    )
    .unwrap();
    let t0 = Instant::now();
    for line in commands(&documented(PAGE, "post-renderer")) {
        let line = if line.starts_with("helm install shop vendor/shop ") {
            swap(
                &line,
                "vendor/shop",
                chart.path().to_str().unwrap(),
                "helm install",
            )
        } else {
            line
        };
        work.run(&rn.cp, &line);
    }
    let rn = rn.workload("shop", "app=shop-db", "redlock-elector-leader");
    rn.route_works("route 2 (helm install --post-renderer)", 2, t0);
    for line in commands(&documented(PAGE, "post-renderer-uninstall")) {
        work.run(&rn.cp, &line);
    }
    rn.nothing_left("route 2's helm uninstall");
}

/// Route (b) of the install page, your own chart with this one as a dependency, from the page's
/// text: its `Chart.yaml` (the dependency's `file://` path made absolute), `values.yaml` (the
/// test's Redis) and pod template part (the hello app in place of `my-app:1.0`), wrapped in the
/// Deployment's first lines that the page leaves out; the page's `helm dependency update` and
/// `helm install`. One leader labelled, a request through the leader Service reaches its app,
/// and after `kubectl delete pod` of the leader, the next one's.
#[test]
fn cp_docs_parent_chart_route_runs_from_the_page() {
    const PAGE: &str = "docs/operating/install.md";
    let node = RealNode::up();
    let work = Workdir::new();
    let (hello_repo, hello_tag) = hello_image(&node.cp);
    let dir = tempdir();
    let chart = dir.path().join("my-chart");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    let dependency = cluster::repo().join("charts/redlock-elector");
    std::fs::write(
        chart.join("Chart.yaml"),
        swap(
            &documented(PAGE, "parent-chart"),
            "file://../redlock-elector",
            &format!("file://{}", dependency.display()),
            "Chart.yaml",
        ),
    )
    .unwrap();
    let values = with_endpoints(
        &documented(PAGE, "parent-values"),
        |i| format!("redis://redis-{i}.redis:6379"),
        &node.endpoints,
        "values.yaml",
    );
    std::fs::write(chart.join("values.yaml"), values).unwrap();
    let pod_template = swap(
        &documented(PAGE, "parent-pod-template"),
        "image: my-app:1.0",
        &format!("image: {hello_repo}:{hello_tag}"),
        "pod template",
    );
    std::fs::write(
        chart.join("templates/deployment.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: parent-app\nspec:\n  replicas: 2\n\
             \x20 selector:\n    matchLabels:\n      app.kubernetes.io/name: parent-app\n{pod_template}"
        ),
    )
    .unwrap();
    let t0 = Instant::now();
    for line in commands(&documented(PAGE, "parent-install")) {
        work.run_in(&node.cp, &line, dir.path());
    }
    let service = node
        .cp
        .kubectl(&["get", "service", "-n", "my-ns", "-o", "name"])
        .lines()
        .find_map(|l| {
            l.strip_prefix("service/")
                .filter(|s| s.ends_with("-leader"))
        })
        .map(str::to_string)
        .expect("the dependency rendered no leader Service");
    let rn = node.workload("my-ns", "app.kubernetes.io/name=parent-app", &service);
    rn.route_works("route (b), your chart with the dependency", 2, t0);
    // The install page's uninstall: the same release name and namespace.
    for line in commands(&documented(PAGE, "uninstall")) {
        work.run_in(&rn.cp, &line, dir.path());
    }
    rn.nothing_left("route (b), the install page's uninstall");
}

/// `kubectl apply -k manifests/example` as the install page documents it: the generated base
/// (the sidecar beside the busybox demo app, two replicas) and three Redis pods, whose addresses
/// the sidecars resolve by their StatefulSet DNS names through the node's CoreDNS. One leader
/// labelled, a request through the leader Service reaches its app (the demo app serves its
/// sidecar's `/leader` answer), `kubectl delete pod` moves both; the page's `kubectl delete -k`
/// leaves nothing of it.
#[test]
fn cp_docs_manifests_example_runs_from_the_page() {
    const PAGE: &str = "docs/operating/install.md";
    let node = RealNode::up();
    library_images(&node.cp);
    let work = Workdir::new();
    let t0 = Instant::now();
    for line in commands(&documented(PAGE, "manifests-example")) {
        work.run(&node.cp, &line);
    }
    let rn = node.workload(
        "redlock-demo",
        "app.kubernetes.io/instance=my-app,app.kubernetes.io/component=app",
        "my-app-leader",
    );
    rn.route_works("manifests/example (kubectl apply -k)", 2, t0);
    // The Redis pods the example runs hold the only state; the namespace goes with them.
    for line in commands(&documented(PAGE, "manifests-example-delete")) {
        work.run(&rn.cp, &line);
    }
    let gone = wait_for(Duration::from_secs(120), Duration::from_millis(500), || {
        let left = rn.cp.kubectl(&["get", "namespaces", "-o", "name"]);
        (!left.lines().any(|l| l == "namespace/redlock-demo")).then_some(())
    });
    assert!(
        gone.is_some(),
        "kubectl delete -k manifests/example left namespace redlock-demo: {}",
        rn.cp.kubectl(&["get", "all", "-n", "redlock-demo"])
    );
}

/// A loopback OCI registry, `crane registry serve` (the crane `scripts/image.sh` pins), stopped
/// on drop.
struct Registry {
    child: std::process::Child,
    port: u16,
    crane: String,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> Registry {
        let out = Command::new(cluster::repo().join("scripts/image.sh"))
            .arg("crane")
            .output()
            .expect("run scripts/image.sh crane");
        assert!(
            out.status.success(),
            "scripts/image.sh crane failed: {out:?}"
        );
        let crane = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let dir = tempdir();
        let log = dir.path().join("registry.log");
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(&crane)
            .args(["registry", "serve", "--address", "127.0.0.1:0"])
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("run crane registry serve");
        let port = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
            let text = std::fs::read_to_string(&log).ok()?;
            let (_, rest) = text.split_once("serving on port ")?;
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "crane registry serve did not say its port: {:?}",
                std::fs::read_to_string(&log)
            )
        });
        Registry {
            child,
            port,
            crane,
            _dir: dir,
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shell lines of the release workflow's step `name`: its `run: |` block, continuations
/// joined.
fn workflow_step(name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(cluster::repo().join(".github/workflows/release.yml"))
        .expect("read .github/workflows/release.yml");
    let after = text
        .split_once(&format!("- name: {name}\n"))
        .unwrap_or_else(|| panic!("the release workflow has no step {name:?}"))
        .1;
    let (mut block, mut indent) = (String::new(), None);
    for line in after.lines() {
        let text = line.trim_start();
        let depth = line.len() - text.len();
        match indent {
            None if text.starts_with("- ") => break,
            None if text == "run: |" => indent = Some(depth + 2),
            None => {}
            Some(i) if !text.is_empty() && depth < i => break,
            Some(_) => block.push_str(&format!("{text}\n")),
        }
    }
    assert!(
        !block.is_empty(),
        "the release workflow's step {name:?} has no run block"
    );
    commands(&block)
}

/// The release, rehearsed, then installed as the page says users will after it. The release
/// workflow's own steps (`.github/workflows/release.yml`, read from the file) run against a
/// loopback registry in place of ghcr.io: the tag checks, the push of the image by digest, the
/// multi-arch index (this machine's architecture only), `helm lint --strict`, `helm package` and
/// `helm push` of the chart. Then the node is given that registry for `ghcr.io` (containerd's
/// hosts.toml), the imported sidecar image is removed, and the install page's post-release
/// `helm install oci://…` runs with the README's values: the chart comes from the registry,
/// every pod pulls the image, one leader is labelled and the leader Service routes to it. The
/// README's own push to a registry (`readme-push`) runs first, against the same registry.
#[test]
fn cp_docs_published_route_installs_the_released_chart_and_pulls_the_image() {
    let node = RealNode::up();
    let mut work = Workdir::new();
    let (hello_repo, hello_tag) = hello_image(&node.cp);
    let registry = Registry::start();
    let local = format!("127.0.0.1:{}", registry.port);
    let reference = &sidecar_image().reference;
    let (image_repo, version) = reference.rsplit_once(':').unwrap();
    let arch = if std::env::consts::ARCH == "x86_64" {
        "amd64"
    } else {
        "arm64"
    };
    let other = if arch == "amd64" { "arm64" } else { "amd64" };

    // The README's push for clusters that pull from a registry (`readme-push`), as written, with
    // REGISTRY the loopback registry, from the checkout's root where the README's build wrote
    // the archive: the registry then holds that very image (its manifest's digest is the
    // archive's).
    let push = swap(
        &documented("README.md", "readme-push"),
        "REGISTRY/",
        &format!("{local}/"),
        "push to a registry",
    );
    for line in commands(&push) {
        work.run_in(&node.cp, &line, &cluster::repo());
    }
    let pushed = push
        .split_whitespace()
        .find(|w| w.starts_with(&format!("{local}/")))
        .expect("the README's push names the registry's image")
        .to_string();
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(cluster::repo().join("target/image/layout/index.json"))
            .expect("the README's push unpacked the archive into target/image/layout"),
    )
    .unwrap();
    let built = index["manifests"][0]["digest"].as_str().unwrap_or_default();
    let got = Command::new(&registry.crane)
        .args(["digest", &pushed])
        .output()
        .expect("run crane digest");
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        built,
        "the README's push: {pushed} is not the image the README built ({got:?})"
    );
    report("docs: readme-push", format!("{pushed} is {built}"));

    // The release: the workflow's steps, from a directory laid out like its checkout (the
    // scripts and the chart of this one, the image the real node built with the same
    // `scripts/image.sh build`, where the workflow's build step writes it).
    let checkout = tempdir();
    for d in ["scripts", "charts", "Cargo.toml"] {
        std::os::unix::fs::symlink(cluster::repo().join(d), checkout.path().join(d)).unwrap();
    }
    std::fs::create_dir_all(checkout.path().join("target/image")).unwrap();
    std::fs::copy(
        &sidecar_image().tar,
        checkout
            .path()
            .join(format!("target/image/redlock-elector-{arch}.oci.tar")),
    )
    .unwrap();
    work.env = vec![
        (
            "IMAGE".into(),
            format!("{local}/redlock-elector/redlock-elector"),
        ),
        (
            "IMAGE_REPOSITORY".into(),
            format!("{local}/redlock-elector/redlock-elector"),
        ),
        (
            "CHART_REPO".into(),
            format!("oci://{local}/redlock-elector/charts"),
        ),
        ("GITHUB_REF_NAME".into(), format!("v{version}")),
    ];
    let steps = [
        "the tag is the crate's version",
        "push it by digest",
        "multi-arch index ghcr.io/redlock-elector/redlock-elector:<version>",
        "the chart's version is the tag's",
        "package and push the chart (OCI artifact)",
    ];
    for step in steps {
        // A step's lines run as one script, as the runner does (`bash -e`): its variables
        // carry from line to line.
        let mut script = vec!["set -e".to_string()];
        for line in workflow_step(step) {
            if line.contains(" login ") {
                report(
                    "release: mapped",
                    format!("`{line}` -> none (a loopback registry)"),
                );
                continue;
            }
            let mut line = line.replace("${{ matrix.arch }}", arch);
            if line.contains("index append") {
                line = swap(
                    &line,
                    &format!(" -m \"$(cat refs/image-ref-{other}/ref)\""),
                    "",
                    "index step",
                );
            }
            if line.starts_with("helm push ") {
                line += " --plain-http";
            }
            script.push(line);
        }
        work.run_in(&node.cp, &script.join("\n"), checkout.path());
        if step == "push it by digest" {
            // upload-artifact / download-artifact: the ref file, for the index job.
            let refs = checkout.path().join(format!("refs/image-ref-{arch}"));
            std::fs::create_dir_all(&refs).unwrap();
            std::fs::copy(checkout.path().join("target/image/ref"), refs.join("ref")).unwrap();
        }
    }
    work.env.clear();

    // The node pulls ghcr.io's images from the loopback registry, and has no copy of its own.
    let node_addr = node.cp.forward(&[registry.port]);
    let hosts = node.cp.dir.join("node/certs.d/ghcr.io");
    std::fs::create_dir_all(&hosts).unwrap();
    std::fs::write(
        hosts.join("hosts.toml"),
        format!(
            "server = \"https://ghcr.io\"\n[host.\"http://{node_addr}:{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            registry.port
        ),
    )
    .unwrap();
    let socket = node.cp.dir.join("node/containerd.sock");
    let ctr = |args: &[&str]| {
        Command::new("ctr")
            .arg("--address")
            .arg(&socket)
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr")
    };
    assert!(
        ctr(&["images", "rm", reference]).status.success(),
        "ctr images rm {reference}"
    );

    // The install page's post-release command, with ghcr.io's chart repository mapped to the
    // loopback registry (plain HTTP).
    work.write(
        "my-values.yaml",
        &readme_values(&node, hello_repo, hello_tag),
    );
    let install = commands(&documented(
        "docs/operating/install.md",
        "published-install",
    ));
    assert_eq!(
        install.len(),
        1,
        "the page's post-release install: {install:?}"
    );
    let line = swap(
        &install[0],
        "oci://ghcr.io/redlock-elector/charts/",
        &format!("oci://{local}/redlock-elector/charts/"),
        "post-release install",
    ) + " --plain-http";
    let t0 = Instant::now();
    work.run(&node.cp, &line);
    let rn = node.workload(
        "my-ns",
        "app.kubernetes.io/instance=my-app",
        "my-app-redlock-elector-leader",
    );
    rn.leads_and_routes(
        "the published route (helm install oci://, the image pulled)",
        3,
        Duration::from_secs(240),
        t0,
    );
    let digest = Command::new(&registry.crane)
        .args([
            "digest",
            &format!("{local}/redlock-elector/redlock-elector:{version}"),
        ])
        .output()
        .expect("run crane digest");
    let digest = String::from_utf8_lossy(&digest.stdout).trim().to_string();
    for pod in rn.pods() {
        let ids: Vec<String> = pod
            .status
            .iter()
            .flat_map(|s| s.init_container_statuses.iter().flatten())
            .filter(|c| c.name == "redlock-elector")
            .map(|c| c.image_id.clone())
            .collect();
        assert_eq!(
            ids,
            [format!("{image_repo}@{digest}")],
            "{}: the sidecar's image is not the one pulled from the registry",
            name(&pod)
        );
    }
    assert!(
        ctr(&["images", "ls", "-q"])
            .stdout
            .windows(reference.len())
            .any(|w| w == reference.as_bytes()),
        "the node has no {reference} after the install: it was not pulled"
    );
    report(
        "release: the sidecar image every pod runs",
        format!("{reference} pulled, {digest}"),
    );
}
