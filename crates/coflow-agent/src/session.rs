//! The agent's side of its session with the coordinator, as every task of the agent (and a
//! [`crate::Phantom`]) speaks through it: [`Link::call`] sends an announcement and waits for its
//! answer (within a deadline), [`Link::tell`] sends a message that has none. Both only queue:
//! [`Batches`], the session's outbound stream, sends whatever queued as one batch per frame.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use coflow_core::FlowId;
use coflow_proto::pb;
use coflow_proto::pb::agent_message::Body;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::Stream;
use tonic::Status;

/// The answer to an announcement: the grant or registration, or the coordinator's refusal.
pub(crate) type Answer = Result<pb::agent_reply::Result, Status>;

/// The most messages sent in one frame.
const MAX_BATCH: usize = 1024;

/// The agent's side of its session with the coordinator, shared by its tasks.
#[derive(Debug, Default)]
pub(crate) struct Link {
    /// The open session's outbound queue; none while the agent has no session.
    out: Mutex<Option<mpsc::UnboundedSender<pb::AgentMessage>>>,
    /// Announcements waiting for their answer, and gets given up on.
    pending: Mutex<Pending>,
    /// Flow ends told while no session was open, sent when the next one opens.
    unsent: Mutex<Vec<pb::AgentMessage>>,
    next: AtomicU64,
}

/// What [`Link`] keeps of the announcements it sent.
#[derive(Debug, Default)]
struct Pending {
    /// Announcements waiting for their answer, by request id.
    waiting: HashMap<u64, oneshot::Sender<Answer>>,
    /// Gets whose caller stopped waiting (its deadline passed, or its client left) before the
    /// answer came: a grant that comes later is a flow no one will fetch, ended at once.
    abandoned: HashSet<u64>,
}

/// An announcement in flight. Dropped before its answer came (the deadline passed, or the
/// caller went away), it leaves word for [`Link::answer`] to end a late grant.
struct Call<'a> {
    link: &'a Link,
    id: u64,
    /// A get (not a re-announced flow), whose late grant would be a flow no one fetches.
    get: bool,
    rx: oneshot::Receiver<Answer>,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let mut p = self.link.pending.lock().expect("pending lock");
        if p.waiting.remove(&self.id).is_some() {
            if self.get {
                p.abandoned.insert(self.id);
            }
            return;
        }
        drop(p);
        // Answered between the caller's last look and now: a grant nobody takes is ended.
        if let Ok(Ok(result)) = self.rx.try_recv() {
            self.link.orphan(result);
        }
    }
}

/// A flow's end as an agent reports it: every byte delivered (`failed` none), or failed of that
/// kind; `bytes` is what its source had sent when it gave the flow up (0 from its receiver).
pub(crate) fn flow_end(flow: FlowId, bytes: u64, failed: Option<coflow_proto::ErrorKind>) -> Body {
    let reason = failed.map_or_else(String::new, |k| k.as_str().to_string());
    Body::Finished(pb::FlowFinishedRequest { flow_id: flow.0, ok: failed.is_none(), bytes, reason })
}

/// The flows a grant names: its parts', or its own for a piece fetched whole.
pub(crate) fn flows_of(grant: &pb::AnnounceGetResponse) -> impl Iterator<Item = FlowId> + '_ {
    let whole = grant.parts.is_empty().then_some(FlowId(grant.flow_id));
    whole.into_iter().chain(grant.parts.iter().map(|p| FlowId(p.flow_id)))
}

/// A refusal the coordinator sent on the session, as a status with its error kind.
fn refusal(f: pb::Failure) -> Status {
    let mut s = Status::new(tonic::Code::from_i32(f.code), f.message);
    if let Some(kind) = coflow_proto::ErrorKind::from_pb(f.kind) {
        kind.attach(&mut s);
    }
    s
}

impl Link {
    /// Sends an announcement and waits at most `deadline` for its answer. Without an open
    /// session, or when the session ends first, the answer is `UNAVAILABLE` without an error
    /// kind: the coordinator is away (callers wait for it within their grace).
    ///
    /// A get given up on (its deadline passed, or its caller went away) whose grant comes later
    /// is ended at once ([`Link::orphan`]), so that the coordinator holds no flow that no one
    /// fetches.
    pub(crate) async fn call(&self, body: Body, deadline: Duration) -> Answer {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        let get = matches!(&body, Body::Get(g) if g.recovered_flow_id == 0);
        self.pending.lock().expect("pending lock").waiting.insert(id, tx);
        let mut call = Call { link: self, id, get, rx };
        let sent = match &*self.out.lock().expect("link lock") {
            Some(out) => out.send(pb::AgentMessage { request_id: id, body: Some(body) }).is_ok(),
            None => false,
        };
        if !sent {
            // Never sent: no answer will come.
            call.get = false;
            return Err(Status::unavailable("no session with the coordinator"));
        }
        match tokio::time::timeout(deadline, &mut call.rx).await {
            Ok(Ok(a)) => a,
            Ok(Err(_)) => Err(Status::unavailable("the session with the coordinator ended")),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "the coordinator did not answer within {} ms",
                deadline.as_millis()
            ))),
        }
    }

    /// Ends a grant that came for a get no one waits for any more: its flows (every part of a
    /// get split over several paths) are reported failed (`client-departed`), as their receiver,
    /// so the coordinator frees them.
    fn orphan(&self, result: pb::agent_reply::Result) {
        if let pb::agent_reply::Result::Get(grant) = result {
            tracing::debug!(flow = grant.flow_id, "a grant came after its get gave up; its flows are ended");
            for flow in flows_of(&grant) {
                self.tell(flow_end(flow, 0, Some(coflow_proto::ErrorKind::ClientDeparted)));
            }
        }
    }

    /// Sends a message that has no answer; false when no session is open (a flow end is then
    /// sent when the next session opens).
    pub(crate) fn tell(&self, body: Body) -> bool {
        let keep = matches!(body, Body::Finished(_));
        let msg = pb::AgentMessage { request_id: 0, body: Some(body) };
        let sent = match &*self.out.lock().expect("link lock") {
            Some(out) => out.send(msg.clone()).is_ok(),
            None => false,
        };
        if !sent && keep {
            self.unsent.lock().expect("unsent lock").push(msg);
        }
        sent
    }

    /// Opens a session: from now on messages queue for it.
    pub(crate) fn open(&self) -> mpsc::UnboundedReceiver<pb::AgentMessage> {
        let (tx, rx) = mpsc::unbounded_channel();
        for msg in self.unsent.lock().expect("unsent lock").drain(..) {
            let _ = tx.send(msg);
        }
        *self.out.lock().expect("link lock") = Some(tx);
        rx
    }

    /// Closes the session: announcements waiting for an answer get "the coordinator is away".
    pub(crate) fn close(&self) {
        *self.out.lock().expect("link lock") = None;
        let mut p = self.pending.lock().expect("pending lock");
        // What the session granted ends with it.
        p.abandoned.clear();
        for (_, tx) in p.waiting.drain() {
            let _ = tx.send(Err(Status::unavailable("the session with the coordinator ended")));
        }
    }

    /// Hands an answer to the announcement waiting for it; a grant for a get that gave up is
    /// ended ([`Link::orphan`]).
    pub(crate) fn answer(&self, r: pb::AgentReply) {
        let answer = match r.result {
            Some(pb::agent_reply::Result::Failure(f)) => Err(refusal(f)),
            Some(other) => Ok(other),
            None => Err(Status::internal("an empty answer from the coordinator")),
        };
        let mut p = self.pending.lock().expect("pending lock");
        let late = match p.waiting.remove(&r.request_id) {
            // Sent under the lock: a caller that stops waiting finds the answer in its channel.
            Some(tx) => tx.send(answer).err(),
            None => p.abandoned.remove(&r.request_id).then_some(answer),
        };
        drop(p);
        if let Some(Ok(result)) = late {
            self.orphan(result);
        }
    }
}

/// A session's outbound stream: the opening batch (machine and session), then whatever queued,
/// as one batch per frame.
pub(crate) struct Batches {
    open: Option<pb::AgentBatch>,
    rx: mpsc::UnboundedReceiver<pb::AgentMessage>,
}

impl Batches {
    /// The stream of a session opened with `open`, sending what queues on `rx`.
    pub(crate) fn new(open: pb::AgentBatch, rx: mpsc::UnboundedReceiver<pb::AgentMessage>) -> Batches {
        Batches { open: Some(open), rx }
    }
}

impl Stream for Batches {
    type Item = pb::AgentBatch;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<pb::AgentBatch>> {
        let mut batch = match self.open.take() {
            Some(b) => b,
            None => match self.rx.poll_recv(cx) {
                Poll::Ready(Some(m)) => pb::AgentBatch { messages: vec![m], ..Default::default() },
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        while batch.messages.len() < MAX_BATCH {
            match self.rx.try_recv() {
                Ok(m) => batch.messages.push(m),
                Err(_) => break,
            }
        }
        Poll::Ready(Some(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_grant_that_comes_after_its_get_gave_up_ends_every_part() {
        let link = Link::default();
        let mut sent = link.open();
        let get = Body::Get(pb::AnnounceGetRequest { coflow_id: 1, data_id: "p".into(), ..Default::default() });
        let gave_up = link.call(get, Duration::from_millis(1)).await;
        assert_eq!(gave_up.unwrap_err().code(), tonic::Code::DeadlineExceeded);
        let request_id = sent.recv().await.expect("the get was sent").request_id;
        let part = |flow_id, offset| pb::FlowPart { flow_id, offset, length: 10, ..Default::default() };
        let grant = pb::AnnounceGetResponse {
            flow_id: 5,
            size: 30,
            parts: vec![part(5, 0), part(6, 10), part(7, 20)],
            ..Default::default()
        };
        link.answer(pb::AgentReply { request_id, result: Some(pb::agent_reply::Result::Get(grant)) });
        let mut ended = Vec::new();
        while let Ok(m) = sent.try_recv() {
            match m.body {
                Some(Body::Finished(f)) => {
                    assert!(!f.ok && f.reason == "client-departed", "{f:?}");
                    ended.push(f.flow_id);
                }
                other => panic!("only flow ends were to be sent, not {other:?}"),
            }
        }
        assert_eq!(ended, [5, 6, 7], "every part's flow ends, not only the first");
        // A whole piece's grant has one flow, its own.
        let whole = pb::AnnounceGetResponse { flow_id: 9, size: 30, ..Default::default() };
        assert_eq!(flows_of(&whole).collect::<Vec<_>>(), [FlowId(9)]);
    }
}
