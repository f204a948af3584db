//! `GET /containerLogs/{namespace}/{pod}/{container}`: a container's log as kubelet serves
//! it, read by `podlogs` (the same reader as `ferrolet logs`), with kubelet's parameters
//! (`follow`, `previous`, `timestamps`, `tailLines`, `sinceSeconds`, `sinceTime`,
//! `limitBytes`), written as a chunked body flushed after each read of the files. A follow
//! ends when the container does, or when the client hangs up.

use super::request::is_true;
use super::request::{Head, PodPath};
use super::tlsio::respond;
use super::tlsio::Tls;
use crate::base::timefmt::parse_rfc3339;
use crate::node::podlogs::{LogOptions, MAX_TAIL};
use crate::node::runtime::ContainerRuntime;
use crate::pods::podcmd::{self, PodCmdError, PodRef, Target};
use std::io::{self, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, SystemTime};

/// kubelet's query, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    /// Go on as the log is written.
    pub follow: bool,
    /// The previous instance.
    pub previous: bool,
    /// How the lines are read.
    pub opts: LogOptions,
    /// At most this many bytes.
    pub limit_bytes: Option<u64>,
}

/// The query of `params`, at `now`, with the apiserver's validation messages.
pub fn query(params: &[(String, String)], now: SystemTime) -> Result<Query, String> {
    let mut q = Query::default();
    let int = |k: &str, v: &str| v.parse::<i64>().map_err(|_| format!("{k}: Invalid value: {v:?}: must be an integer"));
    let (mut since_seconds, mut since_time) = (None, None);
    for (k, v) in params {
        match k.as_str() {
            "follow" => q.follow = is_true(v),
            "previous" => q.previous = is_true(v),
            "timestamps" => q.opts.timestamps = is_true(v),
            "tailLines" => {
                let n = int(k, v)?;
                if n < 0 {
                    return Err(format!("tailLines: Invalid value: {n}: must be greater than or equal to 0"));
                }
                q.opts.tail = Some((n as u64).min(MAX_TAIL));
            }
            "limitBytes" => {
                let n = int(k, v)?;
                if n < 1 {
                    return Err(format!("limitBytes: Invalid value: {n}: must be greater than 0"));
                }
                q.limit_bytes = Some(n as u64);
            }
            "sinceSeconds" => {
                let n = int(k, v)?;
                if n < 1 {
                    return Err(format!("sinceSeconds: Invalid value: {n}: must be greater than 0"));
                }
                since_seconds = Some(now.checked_sub(Duration::from_secs(n as u64)).unwrap_or(SystemTime::UNIX_EPOCH));
            }
            "sinceTime" => {
                since_time = Some(
                    parse_rfc3339(v)
                        .ok_or_else(|| format!("sinceTime: Invalid value: {v:?}: must be an RFC 3339 time"))?,
                );
            }
            _ => {}
        }
    }
    if since_seconds.is_some() && since_time.is_some() {
        return Err("sinceTime: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into());
    }
    q.opts.since = since_seconds.or(since_time);
    Ok(q)
}

/// kubelet's status and text for a container that cannot be found.
fn not_found(e: &PodCmdError, pod: &PodPath) -> (u16, String) {
    match e {
        PodCmdError::PodNotFound { .. } => (404, format!("pod {:?} does not exist", pod.pod)),
        PodCmdError::ContainerNotFound { container, .. } => {
            (404, format!("container {container:?} not found in pod {:?}", pod.pod))
        }
        e => (400, crate::base::errors::Chain(e).to_string()),
    }
}

/// Serves the request; `Ok(true)` when the connection may carry another one.
pub fn serve(tls: &mut Tls, head: &Head, pod: &PodPath, runtime: &dyn ContainerRuntime) -> io::Result<bool> {
    let q = match query(&head.params(), SystemTime::now()) {
        Ok(q) => q,
        Err(text) => return respond(tls, 400, &text, head.close).map(|()| !head.close),
    };
    let target = Target {
        pod: PodRef { namespace: pod.namespace.clone(), name: pod.pod.clone() },
        container: Some(pod.container.clone()),
    };
    let found = podcmd::find(runtime, &target)
        .and_then(|(c, _)| podcmd::choose_instance(&c, &pod.pod, q.previous).cloned().map(|i| (c, i)));
    let (c, instance) = match found {
        Ok(f) => f,
        Err(e) => {
            let (status, text) = not_found(&e, pod);
            return respond(tls, status, &text, head.close).map(|()| !head.close);
        }
    };
    tls.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nX-Content-Type-Options: nosniff\r\n\r\n",
    )?;
    let fd = tls.sock.as_raw_fd();
    let mut gone = false;
    let mut go_on = || {
        gone |= hung_up(fd);
        !gone
    };
    let body = Limit { inner: Chunked(&mut *tls), left: q.limit_bytes.unwrap_or(u64::MAX) };
    let result =
        podcmd::write_logs(runtime, &c, &instance, &pod.pod, q.follow, q.opts, BufWriter::new(body), &mut go_on);
    if let Err(e) = &result {
        log::debug!(
            "server: logs of {}/{}/{}: {}",
            pod.namespace,
            pod.pod,
            pod.container,
            crate::base::errors::Chain(e)
        );
    }
    if gone {
        return Ok(false);
    }
    tls.write_all(b"0\r\n\r\n")?;
    tls.flush()?;
    Ok(result.is_ok() && !head.close && !q.follow)
}

/// Whether the peer of socket `fd` hung up (without reading from it).
fn hung_up(fd: i32) -> bool {
    let mut fds = [libc::pollfd { fd, events: libc::POLLRDHUP, revents: 0 }];
    super::poll(&mut fds, Some(Duration::ZERO))
        .is_ok_and(|n| n > 0 && fds[0].revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0)
}

/// Each write a chunk of a chunked body.
struct Chunked<'a>(&'a mut Tls);

impl Write for Chunked<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.0.write_all(format!("{:x}\r\n", buf.len()).as_bytes())?;
        self.0.write_all(buf)?;
        self.0.write_all(b"\r\n")?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// At most `left` bytes pass; then writing fails (`limitBytes`, as kubelet's LimitWriter).
struct Limit<W> {
    inner: W,
    left: u64,
}

impl<W: Write> Write for Limit<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::other("limitBytes reached"));
        }
        let n = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        self.inner.write_all(&buf[..n])?;
        self.left -= n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_query_is_kubelets_and_checked_as_the_apiserver_checks_it() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let q = query(&p(&[("follow", "true"), ("tailLines", "5"), ("timestamps", "1"), ("sinceSeconds", "10")]), now)
            .unwrap();
        assert!(q.follow && q.opts.timestamps && !q.previous);
        assert_eq!(q.opts.tail, Some(5));
        assert_eq!(q.opts.since, Some(now - Duration::from_secs(10)));
        let q = query(&p(&[("sinceTime", "1970-01-12T13:46:40Z"), ("limitBytes", "7")]), now).unwrap();
        assert_eq!((q.opts.since, q.limit_bytes), (Some(now), Some(7)));
        assert!(query(&p(&[("tailLines", "-1")]), now).unwrap_err().starts_with("tailLines: Invalid value: -1"));
        assert!(query(&p(&[("limitBytes", "0")]), now).unwrap_err().starts_with("limitBytes"));
        assert!(query(&p(&[("sinceSeconds", "x")]), now).unwrap_err().starts_with("sinceSeconds"));
        assert!(query(&p(&[("sinceTime", "yesterday")]), now).unwrap_err().starts_with("sinceTime"));
        assert!(query(&p(&[("sinceTime", "1970-01-12T13:46:40Z"), ("sinceSeconds", "1")]), now).is_err());
    }

    #[test]
    fn a_limit_passes_exactly_its_bytes_then_fails() {
        let mut out = Vec::new();
        let mut l = Limit { inner: &mut out, left: 5 };
        assert!(l.write_all(b"abc").is_ok());
        assert!(l.write_all(b"defg").is_err());
        assert_eq!(out, b"abcde");
    }
}
