//! The reference pages in `docs/reference/` are generated from the code, never edited by hand:
//! each test here renders one page and fails, with the first differing lines, when the
//! committed file differs. `UPDATE_REFERENCE=1 cargo test --test suite -- reference_docs::`
//! rewrites them. Also here: the chart's `values.schema.json` and `values.yaml` agree with the
//! configuration reference on every key they share.
//!
//! Sources: configuration ← `config::reference()` (serde keys + clap args of `Settings`);
//! command line ← clap's `Command`; metrics ← the descriptors of the registry `Metrics::register`
//! fills; HTTP API ← `openapi::document()` (schemas from the types the handlers serialize).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use redlock_elector::config::{self, SettingDoc};
use redlock_elector::metrics::Metrics;
use serde_json::Value;

/// The first line of every generated page (as a comment where the format has them).
pub const GENERATED: &str = "generated, do not edit: regenerate with \
    UPDATE_REFERENCE=1 cargo test --test suite -- reference_docs::";

fn page_path(name: &str) -> PathBuf {
    testkit::repo().join("docs/reference").join(name)
}

/// Compare `text` with the committed page, or rewrite it under `UPDATE_REFERENCE=1`.
fn check_page(name: &str, text: &str) {
    let path = page_path(name);
    if std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("docs/reference")).expect("mkdir");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        eprintln!("[reference] wrote {}", path.display());
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "docs/reference/{name} cannot be read ({e}): generate it with \
             UPDATE_REFERENCE=1 cargo test --test suite -- reference_docs::"
        )
    });
    if committed != text {
        panic!(
            "docs/reference/{name} differs from what the code generates \
             (never edit it by hand; regenerate with \
             UPDATE_REFERENCE=1 cargo test --test suite -- reference_docs:: and commit it):\n{}",
            line_diff(&committed, text)
        );
    }
}

/// The lines around the first difference, `-` committed, `+` generated.
pub fn line_diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let first = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (mut ea, mut eb) = (a.len(), b.len());
    while ea > first && eb > first && a[ea - 1] == b[eb - 1] {
        ea -= 1;
        eb -= 1;
    }
    let mut out = format!("@@ line {} @@\n", first + 1);
    for l in &a[first.saturating_sub(2)..first] {
        let _ = writeln!(out, "  {l}");
    }
    for l in a[first..ea].iter().take(20) {
        let _ = writeln!(out, "- {l}");
    }
    for l in b[first..eb].iter().take(20) {
        let _ = writeln!(out, "+ {l}");
    }
    if ea - first > 20 || eb - first > 20 {
        let _ = writeln!(
            out,
            "  ... ({} lines removed, {} added)",
            ea - first,
            eb - first
        );
    }
    out
}

/// Markdown table cell: pipes escaped, one line.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn settings() -> Vec<SettingDoc> {
    config::reference().expect("the settings' YAML keys and flags are in step")
}

/// What a setting's value is, in words, from its value name (and accepted values).
fn value_words(s: &SettingDoc) -> String {
    if !s.values.is_empty() {
        return s
            .values
            .iter()
            .map(|v| format!("`{v}`"))
            .collect::<Vec<_>>()
            .join(" \\| ");
    }
    let one = match s.value_name.as_str() {
        "DURATION" => "duration (`250ms`, `10s`, `1m`)",
        "BOOL" => "`true` or `false`",
        "NUMBER" => "number",
        "INTEGER" => "integer",
        "ADDR" => "`ip:port`",
        "URL" => "URL",
        "FILE" => "file path",
        _ => "string",
    };
    if s.list {
        format!("list of {one}s (flag: repeat it; env: comma-separated)")
    } else {
        one.to_string()
    }
}

/// A default: a value in code font, a rule (`$POD_NAME, else the hostname`) as text.
fn default_words(d: &str) -> String {
    if d.contains(' ') {
        cell(d)
    } else {
        format!("`{}`", cell(d))
    }
}

fn render_configuration() -> String {
    let all = settings();
    let cmd = config::command();
    let mut out = format!("<!-- {GENERATED} -->\n\n# Configuration reference\n\n");
    out.push_str(
        "Each setting below has a key in the YAML file given with `--config` (camelCase, nested \
         as the dots show; an unknown key is an error), a flag and an environment variable.\n\n",
    );
    if let Some(after) = cmd.get_after_help() {
        for line in after.to_string().lines() {
            let _ = writeln!(out, "{line}");
            out.push('\n');
        }
    }
    out.push_str(
        "An empty value anywhere means the default. `redlock-elector check-config FILE` prints \
         the effective settings ([command line](cli.md)).\n",
    );
    let mut sections: Vec<(&str, Vec<&SettingDoc>)> = Vec::new();
    for s in &all {
        let section = s.key.split('.').next().unwrap_or(&s.key);
        match sections.last_mut() {
            Some((name, list)) if *name == section => list.push(s),
            _ => sections.push((section, vec![s])),
        }
    }
    for (section, list) in sections {
        let _ = write!(
            out,
            "\n## `{section}`\n\n| YAML key | Flag | Env var | Value | Default | What it does |\n\
             |---|---|---|---|---|---|\n"
        );
        for s in list {
            let _ = writeln!(
                out,
                "| `{}` | `{}` | `{}` | {} | {} | {} |",
                s.key,
                s.flag,
                s.env,
                value_words(s),
                s.default.as_deref().map_or("—".to_string(), default_words),
                cell(&s.help)
            );
        }
    }
    out
}

/// What `argv` prints: clap's own rendering of `--help` (as a user sees it, without colour).
fn help_of(argv: &[&str]) -> String {
    match config::command().try_get_matches_from(argv) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => e.to_string(),
        other => panic!("{argv:?} did not print help: {other:?}"),
    }
}

fn render_cli() -> String {
    let mut cmd = config::command();
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut out = format!(
        "<!-- {GENERATED} -->\n\n# Command line reference\n\n\
         What `--help` prints for each command. Every setting's flag also has an environment \
         variable and a YAML key: see the [configuration reference](configuration.md).\n"
    );
    let mut add = |argv: &[&str]| {
        let text = help_of(argv);
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        let _ = write!(
            out,
            "\n## `{}`\n\n```text\n{}\n```\n",
            argv[..argv.len() - 1].join(" "),
            lines.join("\n").trim_end()
        );
    };
    add(&[&name, "--help"]);
    for sub in cmd.get_subcommands() {
        if !sub.is_hide_set() && sub.get_name() != "help" {
            add(&[&name, sub.get_name(), "--help"]);
        }
    }
    out
}

/// The label values a fresh sidecar's registry holds for each metric (after the start-time
/// initialisation of one endpoint): metric → label → values, in first-seen order. The labels
/// whose values are names (`lease`, `endpoint`, `identity`, `version`) are left out.
fn start_values(registry: &prometheus::Registry) -> BTreeMap<String, Vec<(String, Vec<String>)>> {
    let mut out: BTreeMap<String, Vec<(String, Vec<String>)>> = BTreeMap::new();
    for family in registry.gather() {
        let labels = out.entry(family.name().to_string()).or_default();
        for metric in family.get_metric() {
            for pair in metric.get_label() {
                if ["lease", "endpoint", "identity", "version"].contains(&pair.name()) {
                    continue;
                }
                let i = match labels.iter().position(|(l, _)| l == pair.name()) {
                    Some(i) => i,
                    None => {
                        labels.push((pair.name().to_string(), Vec::new()));
                        labels.len() - 1
                    }
                };
                if !labels[i].1.iter().any(|v| v == pair.value()) {
                    labels[i].1.push(pair.value().to_string());
                }
            }
        }
    }
    out
}

fn render_metrics() -> String {
    let registry = prometheus::Registry::new();
    let metrics = Metrics::register(&registry, "LEASE").expect("register the metrics");
    metrics.new_endpoint(
        "HOST:PORT",
        &redlock_elector::redlock::node::endpoint_labels(),
    );
    // As the Kubernetes publisher does when it starts.
    use redlock_elector::k8s::call::{RESULTS, VERBS};
    metrics.new_kube_requests(&VERBS, &RESULTS);
    let values = start_values(&registry);
    let mut out = format!(
        "<!-- {GENERATED} -->\n\n# Metrics reference\n\n\
         Every metric the sidecar registers, as `/metrics` describes it. `lease` is the lease \
         name; the per-endpoint and per-request series leave it out and are joined to it \
         through `redlock_elector_lease_info` (`* on (job, instance) group_left (lease)`). \
         `endpoint` is `host:port`, never a password. A histogram `NAME` is exposed as \
         `NAME_bucket`, `NAME_sum` and `NAME_count`. The label values listed exist from the \
         start, at 0 (per configured endpoint; the Kubernetes ones once publishing starts), so \
         that no panel shows \"No data\" on a healthy deployment.\n\n\
         | Metric | Type | Labels | Values at start | Help |\n|---|---|---|---|---|\n"
    );
    for m in metrics.descriptors() {
        let labels = m
            .labels
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let start = values
            .get(&m.name)
            .into_iter()
            .flatten()
            .map(|(l, vs)| {
                let vs: Vec<String> = vs.iter().map(|v| format!("`{v}`")).collect();
                format!("`{l}`: {}", vs.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} |",
            m.name,
            m.kind,
            if labels.is_empty() {
                "—".into()
            } else {
                labels
            },
            if start.is_empty() {
                "—".into()
            } else {
                start
            },
            cell(&m.help)
        );
    }
    out
}

/// The document as committed: YAML, with the generated note as a comment.
fn render_openapi_yaml() -> String {
    let doc = redlock_elector::openapi::document();
    let yaml = serde_saphyr::to_string(&doc).expect("the OpenAPI document as YAML");
    format!("# {GENERATED}\n{yaml}")
}

fn schema_name(r: &Value) -> Option<&str> {
    r.get("$ref")?.as_str()?.rsplit('/').next()
}

/// A schema as a short type: `string`, `integer | null`, [`Rank`](#rank) ...
fn type_words(s: &Value) -> String {
    if let Some(name) = schema_name(s) {
        return format!("[`{name}`](#{})", name.to_lowercase());
    }
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        return any.iter().map(type_words).collect::<Vec<_>>().join(" \\| ");
    }
    let mut t = match s.get("type") {
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" \\| "),
        Some(Value::String(t)) => t.clone(),
        _ => "any".into(),
    };
    if let Some(extra) = s.get("additionalProperties").filter(|v| v.is_object()) {
        t = format!("object of {}", type_words(extra));
    }
    if let Some(f) = s.get("format").and_then(Value::as_str) {
        t = format!("{t} ({f})");
    }
    t
}

fn render_http_api() -> String {
    let doc = redlock_elector::openapi::document();
    let mut out = format!(
        "<!-- {GENERATED} -->\n\n# HTTP API reference\n\n\
         Rendered from the OpenAPI 3.1 document [`http-api.openapi.yaml`](http-api.openapi.yaml), \
         which the test suite checks against a running sidecar.\n\n{}\n",
        doc["info"]["description"].as_str().unwrap_or_default()
    );
    for tag in doc["tags"].as_array().into_iter().flatten() {
        let tag_name = tag["name"].as_str().unwrap_or_default();
        let _ = write!(
            out,
            "\n## {}\n",
            tag["description"]
                .as_str()
                .unwrap_or(tag_name)
                .trim_end_matches('.')
        );
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            for (method, op) in item.as_object().into_iter().flatten() {
                if op.get("tags").and_then(|t| t[0].as_str()) != Some(tag_name) {
                    continue;
                }
                let server = item["servers"][0]["url"].as_str().unwrap_or_default();
                let _ = write!(
                    out,
                    "\n### `{} {path}`\n\n{}. {}\n\nServer: `{server}`.\n",
                    method.to_uppercase(),
                    op["summary"].as_str().unwrap_or_default(),
                    op["description"].as_str().unwrap_or_default()
                );
                if let Some(params) = op.get("parameters").and_then(Value::as_array) {
                    out.push_str("\n| Parameter | In | Type | Description |\n|---|---|---|---|\n");
                    for p in params {
                        let _ = writeln!(
                            out,
                            "| `{}` | {} | {} | {} |",
                            p["name"].as_str().unwrap_or_default(),
                            p["in"].as_str().unwrap_or_default(),
                            type_words(&p["schema"]),
                            cell(p["description"].as_str().unwrap_or_default())
                        );
                    }
                }
                out.push_str("\n| Status | Content type | Body | Meaning |\n|---|---|---|---|\n");
                for (code, resp) in op["responses"].as_object().into_iter().flatten() {
                    for (ct, content) in resp["content"].as_object().into_iter().flatten() {
                        let body = match content.get("x-event-data") {
                            Some(data) => format!("events of {}", type_words(data)),
                            None => type_words(&content["schema"]),
                        };
                        let _ = writeln!(
                            out,
                            "| {code} | `{ct}` | {body} | {} |",
                            cell(resp["description"].as_str().unwrap_or_default())
                        );
                    }
                }
            }
        }
    }
    out.push_str("\n## Bodies\n");
    for (name, schema) in doc["components"]["schemas"]
        .as_object()
        .into_iter()
        .flatten()
    {
        let _ = write!(
            out,
            "\n### {name}\n\n{}\n\n| Field | Type | Description |\n|---|---|---|\n",
            schema["description"]
                .as_str()
                .unwrap_or_default()
                .replace('\n', " ")
        );
        for (field, s) in schema["properties"].as_object().into_iter().flatten() {
            let _ = writeln!(
                out,
                "| `{field}` | {} | {} |",
                type_words(s),
                cell(s["description"].as_str().unwrap_or_default())
            );
        }
    }
    out
}

#[test]
fn reference_docs_configuration() {
    check_page("configuration.md", &render_configuration());
}

#[test]
fn reference_docs_cli() {
    check_page("cli.md", &render_cli());
}

#[test]
fn reference_docs_metrics() {
    check_page("metrics.md", &render_metrics());
}

#[test]
fn reference_docs_http_api() {
    let yaml = render_openapi_yaml();
    let back: Value = serde_saphyr::from_str(&yaml).expect("the YAML reads back");
    assert_eq!(
        back,
        redlock_elector::openapi::document(),
        "the YAML form of the OpenAPI document does not read back as the document"
    );
    check_page("http-api.openapi.yaml", &yaml);
    check_page("http-api.md", &render_http_api());
}

// ------------------------------------------------------------------------------------------
// The chart and the configuration reference.

/// The chart's `values.schema.json`.
fn values_schema() -> Value {
    let path = testkit::repo().join("charts/redlock-elector/values.schema.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("read values.schema.json"))
        .expect("values.schema.json is JSON")
}

/// Every leaf under the schema's `config` property: dotted key → its schema, `$ref`s resolved.
fn chart_config_leaves(schema: &Value) -> BTreeMap<String, Value> {
    fn walk(root: &Value, prefix: &str, s: &Value, out: &mut BTreeMap<String, Value>) {
        let s = match s.get("$ref").and_then(Value::as_str) {
            Some(r) => root
                .pointer(r.trim_start_matches('#'))
                .unwrap_or_else(|| panic!("values.schema.json: dangling $ref {r}")),
            None => s,
        };
        match s.get("properties").and_then(Value::as_object) {
            Some(props) => {
                for (k, v) in props {
                    let key = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(root, &key, v, out);
                }
            }
            None => {
                out.insert(prefix.to_string(), s.clone());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(schema, "", &schema["properties"]["config"], &mut out);
    out
}

/// The value at a dotted key under `config:` in the chart's `values.yaml`.
fn chart_default(values: &Value, key: &str) -> Option<Value> {
    key.split('.')
        .try_fold(&values["config"], |v, k| v.get(k))
        .cloned()
}

/// `redlock-elector --lease x --redis URL [FLAG VALUE]` through the real parser and validator:
/// the effective settings as `check-config` prints them, or the error.
fn effective(extra: &[&str]) -> Result<String, String> {
    // Pod name and namespace given, so that `--kubernetes true` is valid too.
    let mut argv = vec![
        "redlock-elector",
        "--lease",
        "x",
        "--redis",
        "redis://127.0.0.1:6379",
    ];
    argv.extend(["--pod-name", "p", "--namespace", "n"]);
    argv.extend_from_slice(extra);
    config::load(argv, &config::ProcessEnv)
        .map(|i| config::effective_yaml(&i.config))
        .map_err(|e| e.to_string())
}

/// A value of the chart as the command line would carry it.
fn as_arg(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A setting's value as the chart's values would carry it (typed).
fn typed(s: &SettingDoc, text: &str) -> Value {
    match s.value_name.as_str() {
        "BOOL" => Value::Bool(text == "true"),
        "NUMBER" => text
            .parse::<f64>()
            .map(Value::from)
            .unwrap_or(Value::from(text)),
        "INTEGER" => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or(Value::from(text)),
        _ => Value::from(text),
    }
}

/// The JSON type the chart must give a setting: from its value name.
fn json_type(s: &SettingDoc) -> &'static str {
    match (s.list, s.value_name.as_str()) {
        (true, _) => "array",
        (_, "BOOL") => "boolean",
        (_, "NUMBER") => "number",
        (_, "INTEGER") => "integer",
        _ => "string",
    }
}

/// Settings whose chart default deliberately differs from the binary's: `lease.followApp` is
/// on in the chart (the pod's app containers are known there), off in the binary (outside
/// Kubernetes only `app.healthUrl` says anything about the app).
const CHART_CHOOSES: &[&str] = &["lease.followApp"];

#[test]
fn reference_docs_chart_values_agree_with_the_config_reference() {
    let schema = values_schema();
    let validator = jsonschema::validator_for(&schema).expect("values.schema.json compiles");
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(testkit::repo().join("charts/redlock-elector/values.yaml"))
            .expect("read values.yaml"),
    )
    .expect("values.yaml is YAML");
    let leaves = chart_config_leaves(&schema);
    let settings: BTreeMap<String, SettingDoc> =
        settings().into_iter().map(|s| (s.key.clone(), s)).collect();
    let baseline = effective(&[]).expect("the minimal config is valid");
    let mut problems = Vec::new();
    let mut shared = 0;
    // A values document with `config.<key>` set to `v`, for the chart's schema.
    let with = |key: &str, v: Value| {
        let mut doc = v;
        for k in key.split('.').rev().chain(["config"]) {
            doc = serde_json::json!({ k: doc });
        }
        doc
    };
    for (key, leaf) in &leaves {
        let Some(s) = settings.get(key) else {
            problems.push(format!(
                "config.{key}: the chart offers a key the sidecar does not have"
            ));
            continue;
        };
        shared += 1;
        // Types.
        let chart_types: Vec<&str> = match &leaf["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if leaf.get("enum").is_none() && !chart_types.contains(&json_type(s)) {
            problems.push(format!(
                "config.{key}: the chart says {chart_types:?}, the sidecar takes {} ({})",
                json_type(s),
                s.value_name
            ));
        }
        // Values the chart accepts must be accepted by the sidecar, and the reverse for a
        // fixed set.
        if let Some(allowed) = leaf.get("enum").and_then(Value::as_array) {
            for v in allowed {
                let arg = as_arg(v);
                if arg.is_empty() {
                    continue; // "" = the binary's default, left out of the rendered file
                }
                if !s.values.is_empty() && !s.values.contains(&arg) {
                    problems.push(format!(
                        "config.{key}: the chart allows {arg:?}, the sidecar's values are {:?}",
                        s.values
                    ));
                }
                if let Err(e) = effective(&[&s.flag, &arg]) {
                    problems.push(format!(
                        "config.{key}: the chart allows {arg:?}, the sidecar rejects it: {e}"
                    ));
                }
            }
        }
        for v in &s.values {
            if !validator.is_valid(&with(key, typed(s, v))) {
                problems.push(format!(
                    "config.{key}: the sidecar takes {v:?}, values.schema.json rejects it"
                ));
            }
        }
        // Defaults, where both state one: the sidecar's must pass the chart's schema, and the
        // chart's must mean the same effective setting.
        let config_default = s
            .default
            .as_deref()
            .filter(|d| effective(&[&s.flag, d]).is_ok_and(|e| e == baseline));
        if let Some(d) = config_default
            && !validator.is_valid(&with(key, typed(s, d)))
        {
            problems.push(format!(
                "config.{key}: the sidecar's default {d:?} fails values.schema.json"
            ));
        }
        let chart = chart_default(&values, key);
        let chart_arg = chart
            .as_ref()
            .map(as_arg)
            .filter(|a| !a.is_empty() && a != "[]");
        if let (Some(d), Some(c)) = (config_default, chart_arg)
            && !CHART_CHOOSES.contains(&key.as_str())
        {
            match effective(&[&s.flag, &c]) {
                Ok(e) if e == baseline => {}
                Ok(_) => problems.push(format!(
                    "config.{key}: values.yaml's default {c:?} differs from the sidecar's {d:?}"
                )),
                Err(e) => problems.push(format!(
                    "config.{key}: values.yaml's {c:?} is rejected: {e}"
                )),
            }
        }
    }
    // The template writes each chart key under the same config key.
    let tpl = std::fs::read_to_string(
        testkit::repo().join("charts/redlock-elector/templates/_config.tpl"),
    )
    .expect("read _config.tpl");
    for used in tpl.split("$c.").skip(1) {
        let key: String = used
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '.')
            .collect();
        let key = key.trim_end_matches('.');
        if !leaves.contains_key(key) && !leaves.keys().any(|l| l.starts_with(&format!("{key}."))) {
            problems.push(format!(
                "_config.tpl reads config.{key}, which values.schema.json does not have"
            ));
        }
        if let Some(last) = key.rsplit('.').next()
            && settings.contains_key(key)
            && !tpl.contains(&format!("{last}:"))
        {
            problems.push(format!(
                "_config.tpl reads config.{key} but never writes a `{last}:` key"
            ));
        }
    }
    assert!(
        shared >= 25,
        "only {shared} shared keys found: is the schema's `config` section moved?"
    );
    assert!(
        problems.is_empty(),
        "the chart and the configuration reference disagree:\n{}",
        problems.join("\n")
    );
    eprintln!("[reference] chart and config agree on {shared} shared keys");
}
