//! The binary's own scripts (`src/redlock/scripts.rs`) run with `EVAL` on a test server: what
//! the script-level tests of `rollout` and `fresh_handover` share.

use redis::Value;
use testkit::common::Redis;

/// A function that runs a script with `EVAL` on `node` and returns its reply after the leading
/// `TIME`.
pub fn evaluator(node: &Redis) -> impl FnMut(&str, &[&str], &[&str]) -> Vec<Value> {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{}/", node.port))
        .and_then(|cl| cl.get_connection())
        .expect("connect to the test redis-server");
    move |src: &str, keys: &[&str], args: &[&str]| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(src).arg(keys.len()).arg(keys).arg(args);
        match cmd.query(&mut c).expect("script runs") {
            Value::Array(items) => items[1..].to_vec(),
            other => panic!("{other:?}"),
        }
    }
}
