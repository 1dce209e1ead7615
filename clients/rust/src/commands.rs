//! [`CtrCommands`] (sync) and [`AsyncCtrCommands`] (async), generated from one list so that
//! both have the same methods, arguments, documentation and replies.

use redis::{ConnectionLike, ToRedisArgs};

use crate::calls::Rate;
use crate::calls::{self, Call};
use crate::error::CtrError;
use crate::spread::send_once;
use crate::types::{
    AddOptions, CounterInfo, IncrexOptions, Increxed, PncInfo, Reconciled, Source, Throttled,
};

/// Sends one command and parses its reply; a write is sent once on a sync cluster connection
/// ([`send_once`]: the redis crate would resend it after a timeout, and each copy the server
/// read would count).
fn send<C: ConnectionLike + 'static, T>(con: &mut C, call: Call<T>) -> Result<T, CtrError> {
    if call.write {
        send_once(con, call)
    } else {
        run(con, call)
    }
}

/// Sends one command and parses its reply.
pub(crate) fn run<C: ConnectionLike, T>(con: &mut C, call: Call<T>) -> Result<T, CtrError> {
    let value = call.cmd.query::<redis::Value>(con)?;
    (call.parse)(value)
}

#[cfg(feature = "aio")]
pub(crate) async fn run_async<C: redis::aio::ConnectionLike + Send, T>(
    con: &mut C,
    call: Call<T>,
) -> Result<T, CtrError> {
    let value = call.cmd.query_async::<redis::Value>(con).await?;
    (call.parse)(value)
}

macro_rules! commands {
    ($(
        $(#[$doc:meta])*
        fn $name:ident<$($g:ident: $bound:path),*>($($arg:ident: $ty:ty),*) -> $ret:ty = $build:path;
    )*) => {
        /// The module's commands on every sync connection: `redis::Connection`,
        /// `redis::cluster::ClusterConnection` (each command goes to its key's master), ...
        /// Implemented for every `ConnectionLike`.
        ///
        /// A write (every command but the reads `ctr_get`, `ctr_mget`, `ctr_holders`,
        /// `ctr_info`, `pnc_get`, `pnc_state`, `pnc_info`) is sent once: on a
        /// `ClusterConnection`, which resends a command after an I/O error (a timeout too), as
        /// a one-command cluster pipeline, which it does not resend; a reply that timed out is
        /// returned as its error (the write counted once or not at all).
        pub trait CtrCommands: ConnectionLike + Sized + 'static {
            $(
                $(#[$doc])*
                fn $name<$($g: $bound),*>(&mut self, $($arg: $ty),*) -> Result<$ret, CtrError> {
                    send(self, $build($($arg),*))
                }
            )*
        }

        impl<C: ConnectionLike + 'static> CtrCommands for C {}

        /// The module's commands on every async connection (`aio::MultiplexedConnection`,
        /// `cluster_async::ClusterConnection`, ...): the same methods as [`CtrCommands`],
        /// returning futures.
        #[cfg(feature = "aio")]
        pub trait AsyncCtrCommands: redis::aio::ConnectionLike + Send + Sized {
            $(
                $(#[$doc])*
                fn $name<$($g: $bound),*>(
                    &mut self,
                    $($arg: $ty),*
                ) -> impl std::future::Future<Output = Result<$ret, CtrError>> + Send {
                    let call = $build($($arg),*);
                    run_async(self, call)
                }
            )*
        }

        #[cfg(feature = "aio")]
        impl<C: redis::aio::ConnectionLike + Send> AsyncCtrCommands for C {}

        /// The module's commands queued on a `redis::Pipeline` (`redis::pipe()`, `.atomic()` for
        /// MULTI/EXEC), in the style of redis-rs's own command methods on a pipeline: the same
        /// methods as [`CtrCommands`], each queueing its command and returning the pipeline.
        /// Read the replies with [`CtrPipelineCommands::query_ctr`] (the module's errors as
        /// [`CtrError::Module`]) into a tuple or a `Vec`; [`CounterInfo`], [`PncInfo`] and
        /// [`Reconciled`] read from a reply as the connection methods return them.
        ///
        /// Nothing is read before the pipeline is sent (no `CTR.HOLDERS`): every command goes to
        /// the key given; an add to a spread counter's home counts on the home, a
        /// `ctr_decrfloor` asks that key alone (buy from a spread counter with
        /// [`SpreadRouter::decrfloor`](crate::SpreadRouter::decrfloor)).
        pub trait CtrPipelineCommands {
            $(
                $(#[$doc])*
                fn $name<$($g: $bound),*>(&mut self, $($arg: $ty),*) -> &mut Self;
            )*

            /// Sends the pipeline and reads its replies as `T`; a module error (of any command)
            /// is a [`CtrError::Module`].
            fn query_ctr<T: redis::FromRedisValue, C: ConnectionLike>(
                &self,
                con: &mut C,
            ) -> Result<T, CtrError>;

            /// [`query_ctr`](CtrPipelineCommands::query_ctr) on an async connection.
            #[cfg(feature = "aio")]
            fn query_ctr_async<T: redis::FromRedisValue, C: redis::aio::ConnectionLike + Send>(
                &self,
                con: &mut C,
            ) -> impl std::future::Future<Output = Result<T, CtrError>> + Send;
        }

        impl CtrPipelineCommands for redis::Pipeline {
            $(
                fn $name<$($g: $bound),*>(&mut self, $($arg: $ty),*) -> &mut Self {
                    self.add_command($build($($arg),*).cmd)
                }
            )*

            fn query_ctr<T: redis::FromRedisValue, C: ConnectionLike>(
                &self,
                con: &mut C,
            ) -> Result<T, CtrError> {
                Ok(self.query(con)?)
            }

            #[cfg(feature = "aio")]
            fn query_ctr_async<T: redis::FromRedisValue, C: redis::aio::ConnectionLike + Send>(
                &self,
                con: &mut C,
            ) -> impl std::future::Future<Output = Result<T, CtrError>> + Send {
                async move { Ok(self.query_async(con).await?) }
            }
        }
    };
}

commands! {
    /// `CTR.ADD key delta`: the new value; None when a negative delta is refused by the
    /// counter's floor (nothing changed).
    fn ctr_add<K: ToRedisArgs>(key: K, delta: i64) -> Option<i64> = calls::add;

    /// `CTR.ADD key delta [TOKEN t] [AT ms] [EX s | PX ms | EXAT unix-s | PXAT unix-ms |
    /// PERSIST] [ENX]`: with a token, a retry counts once (see [`AddOptions`]).
    fn ctr_add_with<K: ToRedisArgs>(key: K, delta: i64, options: &AddOptions) -> Option<i64>
        = calls::add_with;

    /// `CTR.GET key`: the value, 0 when the key is missing.
    fn ctr_get<K: ToRedisArgs>(key: K) -> i64 = calls::get;

    /// `CTR.MGET key...`: one value per key, in order (keys share a slot in a cluster).
    fn ctr_mget<K: ToRedisArgs>(keys: &[K]) -> Vec<i64> = calls::mget;

    /// `CTR.CLEAR key`: resets to 0 (keeping the floor); the value before.
    fn ctr_clear<K: ToRedisArgs>(key: K) -> i64 = calls::clear;

    /// `CTR.CLEAR key TOKEN t`: idempotent reset.
    fn ctr_clear_with_token<K: ToRedisArgs, T: AsRef<[u8]>>(key: K, token: T) -> i64
        = calls::clear_with_token;

    /// `CTR.FLOOR key floor|NONE`: sets (Some) or removes (None) the floor.
    fn ctr_floor<K: ToRedisArgs>(key: K, floor: Option<i64>) -> () = calls::floor;

    /// `CTR.CEIL key ceiling|NONE`: sets (Some) or removes (None) the ceiling; a positive add
    /// that would pass it is refused (None).
    fn ctr_ceil<K: ToRedisArgs>(key: K, ceiling: Option<i64>) -> () = calls::ceil;

    /// `CTR.INCREX key [BYINT n] [LBOUND lb] [UBOUND ub] [SATURATE] [expiry] [ENX] [TOKEN t]
    /// [AT ms]`: Redis 8.8's `INCREX` on a counter; `applied` is 0 when the result fell
    /// outside the bounds (nothing changed). With a token, a retry replies the first reply.
    fn ctr_increx<K: ToRedisArgs>(key: K, options: &IncrexOptions) -> Increxed = calls::increx;

    /// `CTR.REFUND key TOKEN t`: gives back, once, what the tokened decrement `t` took; the
    /// units returned (the same on a retry), None when the token has no grant in the window.
    fn ctr_refund<K: ToRedisArgs, T: AsRef<[u8]>>(key: K, token: T) -> Option<i64>
        = calls::refund;

    /// `CTR.DECRFLOOR key amount`: the new value, or None when it would cross the floor.
    fn ctr_decrfloor<K: ToRedisArgs>(key: K, amount: i64) -> Option<i64> = calls::decrfloor;

    /// `CTR.DECRFLOOR key amount TOKEN t [AT ms]`: a retry replays the first outcome.
    fn ctr_decrfloor_with<K: ToRedisArgs, T: AsRef<[u8]>>(
        key: K,
        amount: i64,
        token: T,
        at: Option<i64>
    ) -> Option<i64> = calls::decrfloor_with;

    /// `CTR.RECONCILE key truth [AT watermark]`.
    fn ctr_reconcile<K: ToRedisArgs>(key: K, truth: i64, at: Option<i64>) -> Reconciled
        = calls::reconcile;

    /// `CTR.RECONCILE key FROM STREAM|ZSET|SET source [AT watermark]` (source in the key's slot).
    fn ctr_reconcile_from<K: ToRedisArgs, S: ToRedisArgs>(
        key: K,
        kind: Source,
        source: S,
        at: Option<i64>
    ) -> Reconciled = calls::reconcile_from;

    /// `CTR.RECONCILE key START`: the counter keeps time buckets from now on (created at 0 when
    /// missing); the earliest watermark a reconcile `AT` accepts.
    fn ctr_reconcile_start<K: ToRedisArgs>(key: K) -> i64 = calls::reconcile_start;

    /// `CTR.THROTTLE key max_burst count period quantity`: a GCRA limiter of `count` units
    /// per `period` seconds with bursts of `max_burst + 1` (`rate = (max_burst, count,
    /// period)`); takes `quantity` (0 reads). redis-cell's `CL.THROTTLE` reply, typed.
    fn ctr_throttle<K: ToRedisArgs>(key: K, rate: Rate, quantity: i64) -> Throttled
        = calls::throttle;

    /// `CTR.THROTTLE ... TOKEN t [AT ms]`: a retry replies the first call's reply and takes
    /// nothing.
    fn ctr_throttle_with<K: ToRedisArgs, T: AsRef<[u8]>>(
        key: K,
        rate: Rate,
        quantity: i64,
        token: T,
        at: Option<i64>
    ) -> Throttled = calls::throttle_with;

    /// `CTR.WINDOW key window-ms [BUCKETS n] | NONE`: the counter's value is from now on what
    /// was added in the last `window_ms` (exact to `window_ms / buckets`; 10 buckets when
    /// None); `window_ms` None removes the window. Creates the counter at 0 when missing.
    fn ctr_window<K: ToRedisArgs>(key: K, window_ms: Option<i64>, buckets: Option<i64>) -> ()
        = calls::window;

    /// `CTR.SPREAD key holders`: makes `key` the home of a spread counter of `holders` holders
    /// (it can only grow); every holder's name, the home first. Write it with a
    /// [`SpreadRouter`](crate::SpreadRouter) (its `spread` also tells the router at once).
    fn ctr_spread<K: ToRedisArgs>(key: K, holders: u32) -> Vec<String> = calls::spread;

    /// `CTR.HOLDERS key`: a spread counter's holder names, the home first, read from the home's
    /// master alone (it never waits for other masters); `[key]` when the key is not spread or
    /// missing. On a holder's name: [`ModuleError::UseHomeKey`](crate::ModuleError::UseHomeKey).
    fn ctr_holders<K: ToRedisArgs>(key: K) -> Vec<String> = calls::holders;

    /// `CTR.HOLDERS key AT ms`: the holders in force at `at` (unix ms, the home master's
    /// clock), the home first: those a shrink folded back since included, those a grow listed
    /// after `at` not. The list a purchase of that time walks
    /// ([`SpreadRouter::decrfloor`](crate::SpreadRouter::decrfloor) reads it). `at` ahead of
    /// the home's clock: [`ModuleError::HoldersAhead`](crate::ModuleError::HoldersAhead) (its
    /// text gives the clock); a home spread by an earlier module version:
    /// [`ModuleError::HoldersUnknown`](crate::ModuleError::HoldersUnknown).
    fn ctr_holders_at<K: ToRedisArgs>(key: K, at: i64) -> Vec<String> = calls::holders_at;

    /// `CTR.INFO key`: None when the key is missing. On the home key of a spread counter,
    /// `value` is the total and `holders`, `holder_values`, `holder_ages_ms` are set.
    fn ctr_info<K: ToRedisArgs>(key: K) -> Option<CounterInfo> = calls::info;

    /// `PNC.ADD key delta`: adds to this deployment's slot; the new value.
    fn pnc_add<K: ToRedisArgs>(key: K, delta: i64) -> i64 = calls::pnc_add;

    /// `PNC.GET key`: the value, 0 when the key is missing.
    fn pnc_get<K: ToRedisArgs>(key: K) -> i64 = calls::pnc_get;

    /// `PNC.STATE key`: the state blob for `pnc_merge` elsewhere; None when the key is missing.
    fn pnc_state<K: ToRedisArgs>(key: K) -> Option<Vec<u8>> = calls::pnc_state;

    /// `PNC.MERGE key state`: the new value.
    fn pnc_merge<K: ToRedisArgs>(key: K, state: &[u8]) -> i64 = calls::pnc_merge;

    /// `PNC.CLEAR key`: observed reset; the value before.
    fn pnc_clear<K: ToRedisArgs>(key: K) -> i64 = calls::pnc_clear;

    /// `PNC.INFO key`: value, replica ids and every replica's slot.
    fn pnc_info<K: ToRedisArgs>(key: K) -> PncInfo = calls::pnc_info;
}
