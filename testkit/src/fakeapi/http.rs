//! The fake's HTTP/1.1 side: plain HTTP on loopback, keep-alive, one thread per connection;
//! reading a request (content length or chunked), decoding its query, applying an injected fault
//! (a status, or a delay served outside the lock), recording it, and writing the answer. An
//! outage ([`Inner::up`] false) refuses new connections and drops answers in flight.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::records::{Action, Record};
use super::state::{State, route, status_body};

pub(super) struct Inner {
    pub(super) state: Mutex<State>,
    pub(super) listener: Mutex<Option<TcpListener>>,
    pub(super) conns: Mutex<Vec<TcpStream>>,
    pub(super) up: AtomicBool,
    pub(super) stop: AtomicBool,
    pub(super) port: u16,
}

pub(super) fn accept_loop(inner: Arc<Inner>) {
    while !inner.stop.load(Ordering::SeqCst) {
        let accepted = match inner.listener.lock().unwrap().as_ref() {
            Some(l) => l.accept().ok(),
            None => None,
        };
        match accepted {
            Some((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                if let Ok(c) = stream.try_clone() {
                    inner.conns.lock().unwrap().push(c);
                }
                let i = inner.clone();
                std::thread::spawn(move || serve_conn(i, stream));
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

struct Request {
    method: String,
    target: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let mut body = Vec::new();
    if let Some(n) = headers.get("content-length") {
        body.resize(n.parse().ok()?, 0);
        r.read_exact(&mut body).ok()?;
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

fn serve_conn(inner: Arc<Inner>, stream: TcpStream) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    while let Some(req) = read_request(&mut reader) {
        if !inner.up.load(Ordering::SeqCst) {
            return;
        }
        let close = req
            .headers
            .get("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let (status, body) = handle(&inner, req);
        if !inner.up.load(Ordering::SeqCst) {
            // Went down while handling: the answer is lost, as with a real outage.
            return;
        }
        let reason = match status {
            200 => "OK",
            201 => "Created",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            409 => "Conflict",
            415 => "Unsupported Media Type",
            _ => "Error",
        };
        let text = body.to_string();
        let resp = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if writer.write_all(resp.as_bytes()).is_err() || close {
            let _ = writer.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let h = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(h, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn handle(inner: &Inner, req: Request) -> (u16, Value) {
    let received = Instant::now();
    let (path, query) = match req.target.split_once('?') {
        Some((p, q)) => (p.to_string(), parse_query(q)),
        None => (req.target.clone(), BTreeMap::new()),
    };
    let who = req
        .headers
        .get("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let content_type = req.headers.get("content-type").cloned();
    let body: Option<Value> = if req.body.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice(&req.body)
                .unwrap_or_else(|_| json!({"unparseable": String::from_utf8_lossy(&req.body)})),
        )
    };

    // Faults: decided at arrival; a delay is served outside the lock. A watch (refused here,
    // see `route`) is not a list: no fault meant for the list is spent on it.
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let action = {
        let mut st = inner.state.lock().unwrap();
        let mut found = None;
        for f in st.faults.iter_mut() {
            if !watch && f.times != Some(0) && f.matches(&req.method, &path, &who) {
                if let Some(n) = f.times.as_mut() {
                    *n -= 1;
                }
                found = Some(f.action.clone());
                break;
            }
        }
        found
    };
    if let Some(Action::Delay(d)) = action {
        std::thread::sleep(d);
    }

    let mut st = inner.state.lock().unwrap();
    st.seq += 1;
    let seq = st.seq;
    let (status, answer) = match action {
        Some(Action::Status(code)) => (
            code,
            status_body(code, "Injected", &format!("injected {code}")),
        ),
        _ => route(
            &mut st,
            &req.method,
            &path,
            &query,
            content_type.as_deref(),
            body.as_ref(),
        ),
    };
    st.log.push(Record {
        seq,
        received,
        at: Instant::now(),
        who,
        method: req.method,
        path,
        query,
        content_type,
        body,
        status,
    });
    (status, answer)
}
