//! A request body read as NDJSON lines while it arrives, within size limits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use futures::{Stream, StreamExt};
use tokio::sync::watch;

/// Size limits of a stream upload.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// All lines together.
    pub max_body: usize,
    /// One line.
    pub max_line: usize,
}

struct Reader {
    chunks: futures::stream::BoxStream<'static, Result<Bytes, axum::Error>>,
    buf: Vec<u8>,
    /// Where the unread part of `buf` starts.
    start: usize,
    total: usize,
    limits: Limits,
    ended: bool,
    shutdown: watch::Receiver<bool>,
    too_large: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
}

/// The lines of `body` (without their `\n` or `\r\n`), each read before the next is
/// asked for. An `Err` item ends the input: a line over `max_line`, a body over
/// `max_body` (both set `too_large`), a line that is not UTF-8, or a body that broke
/// off. When the server starts shutting down, the lines end early and `stopped` is set.
pub(crate) fn lines(
    body: Body,
    limits: Limits,
    shutdown: watch::Receiver<bool>,
    too_large: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
) -> impl Stream<Item = Result<String, String>> + Send {
    let reader = Reader {
        chunks: body.into_data_stream().boxed(),
        buf: Vec::new(),
        start: 0,
        total: 0,
        limits,
        ended: false,
        shutdown,
        too_large,
        stopped,
    };
    futures::stream::unfold(Some(reader), |reader| async move {
        let mut r = reader?;
        match r.next_line().await {
            Some(Ok(line)) => Some((Ok(line), Some(r))),
            Some(Err(e)) => Some((Err(e), None)),
            None => None,
        }
    })
}

impl Reader {
    async fn next_line(&mut self) -> Option<Result<String, String>> {
        loop {
            if let Some(pos) = self.buf[self.start..].iter().position(|&b| b == b'\n') {
                let end = self.start + pos;
                let line = self.take(end, end + 1);
                return Some(line);
            }
            // A line at the limit may still wait for its `\r\n`.
            if self.buf.len() - self.start > self.limits.max_line + 1 {
                return Some(Err(self.line_too_long()));
            }
            if self.ended {
                if self.start == self.buf.len() {
                    return None;
                }
                let end = self.buf.len();
                return Some(self.take(end, end));
            }
            if *self.shutdown.borrow() {
                self.stopped.store(true, Ordering::Release);
                return None;
            }
            let mut shutdown = self.shutdown.clone();
            let chunk = tokio::select! {
                chunk = self.chunks.next() => chunk,
                _ = shutdown.wait_for(|down| *down) => {
                    self.stopped.store(true, Ordering::Release);
                    return None;
                }
            };
            match chunk {
                None => self.ended = true,
                Some(Err(e)) => return Some(Err(format!("the request body broke off: {e}"))),
                Some(Ok(bytes)) => {
                    self.total += bytes.len();
                    if self.total > self.limits.max_body {
                        self.too_large.store(true, Ordering::Release);
                        return Some(Err(format!(
                            "the upload is larger than this server's limit of {} bytes",
                            self.limits.max_body
                        )));
                    }
                    if self.start > 0 && self.start == self.buf.len() {
                        self.buf.clear();
                        self.start = 0;
                    } else if self.start > 64 << 10 {
                        self.buf.drain(..self.start);
                        self.start = 0;
                    }
                    self.buf.extend_from_slice(&bytes);
                }
            }
        }
    }

    /// The line from `start` to `end` (a `\r` before it dropped); the next starts at
    /// `next`.
    fn take(&mut self, end: usize, next: usize) -> Result<String, String> {
        let mut bytes = &self.buf[self.start..end];
        if bytes.last() == Some(&b'\r') {
            bytes = &bytes[..bytes.len() - 1];
        }
        if bytes.len() > self.limits.max_line {
            return Err(self.line_too_long());
        }
        let line = std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|e| format!("the line is not UTF-8: {e}"));
        self.start = next;
        line
    }

    fn line_too_long(&self) -> String {
        self.too_large.store(true, Ordering::Release);
        format!(
            "the line is longer than this server's limit of {} bytes",
            self.limits.max_line
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn collect(
        chunks: Vec<&'static str>,
        limits: Limits,
    ) -> (Vec<Result<String, String>>, bool) {
        let body = Body::from_stream(futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::io::Error>(Bytes::from(c))),
        ));
        collect_body(body, limits).await
    }

    /// The lines of `body`, and whether it was too large.
    async fn collect_body(body: Body, limits: Limits) -> (Vec<Result<String, String>>, bool) {
        let (_tx, rx) = watch::channel(false);
        let too_large = Arc::new(AtomicBool::new(false));
        let out = lines(
            body,
            limits,
            rx,
            Arc::clone(&too_large),
            Arc::new(AtomicBool::new(false)),
        )
        .collect()
        .await;
        (out, too_large.load(Ordering::Acquire))
    }

    /// `out` is the lines `ok`, then an error that says `says`, and nothing after it.
    fn ends_with_error(out: &[Result<String, String>], ok: &[&str], says: &str) {
        assert_eq!(out.len(), ok.len() + 1, "{out:?}");
        for (got, want) in out.iter().zip(ok) {
            assert_eq!(got.as_deref(), Ok(*want), "{out:?}");
        }
        assert!(
            out[ok.len()].as_ref().is_err_and(|e| e.contains(says)),
            "{out:?}"
        );
    }

    const ROOMY: Limits = Limits {
        max_body: 1 << 20,
        max_line: 1 << 10,
    };

    #[tokio::test]
    async fn lines_are_joined_across_chunks_and_split_inside_one() {
        let (out, big) = collect(vec!["{\"a\":", "1}\n{\"b\"", ":2}\r\n\n{\"c\":3}"], ROOMY).await;
        let expected: Vec<Result<String, String>> = vec![
            Ok("{\"a\":1}".into()),
            Ok("{\"b\":2}".into()),
            Ok(String::new()),
            Ok("{\"c\":3}".into()),
        ];
        assert_eq!(out, expected);
        assert!(!big);
    }

    #[tokio::test]
    async fn a_line_over_the_limit_ends_the_input_with_an_error() {
        let limits = Limits {
            max_body: 1 << 20,
            max_line: 8,
        };
        let (out, big) = collect(vec!["short\n", "0123456789", "abc\nnext\n"], limits).await;
        ends_with_error(&out, &["short"], "limit of 8 bytes");
        assert!(big);
        // Exactly at the limit is fine, also as the last line without a newline.
        let (out, big) = collect(vec!["12345678\n", "abcdefgh"], limits).await;
        assert_eq!(out, vec![Ok("12345678".into()), Ok("abcdefgh".into())]);
        assert!(!big);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_ends_the_input_with_an_error() {
        let limits = Limits {
            max_body: 10,
            max_line: 100,
        };
        let (out, big) = collect(vec!["aaaa\n", "bbbb\n", "cccc\n"], limits).await;
        ends_with_error(&out, &["aaaa", "bbbb"], "limit of 10 bytes");
        assert!(big);
    }

    #[tokio::test]
    async fn a_line_that_is_not_utf8_is_an_error_naming_it() {
        let body = Body::from(vec![b'o', b'k', b'\n', 0xff, b'\n']);
        let (out, _) = collect_body(body, ROOMY).await;
        ends_with_error(&out, &["ok"], "not UTF-8");
    }
}
