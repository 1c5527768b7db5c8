//! Response rate limiting (RRL) for UDP, per client prefix: off unless
//! `rrl_responses_per_second` is set.
//!
//! Every UDP query from a client (IPv4 /24 and IPv6 /56 by default) draws
//! on one token bucket of `rrl_responses_per_second` responses a second,
//! holding at most one second's worth. A query the bucket has no token for
//! gets no response, except every `slip`-th one, which gets a truncated
//! response (TC set, the question, no records; [`write_slip`]) so that a
//! real client behind the prefix retries over TCP, which is not limited.
//!
//! The buckets live in one fixed table of [`AtomicU64`] slots shared by all
//! UDP workers (SO_REUSEPORT spreads one client's source ports over the
//! workers, so per-worker tables would each grant the full rate). A slot
//! holds the bucket as a GCRA "theoretical arrival time" plus the slip
//! counter, updated with one compare-and-swap; the clock is read once per
//! received batch. Prefixes are hashed to a slot with a per-process random
//! key and never stored: two prefixes in one slot share its bucket (the
//! chance for two given prefixes is 1 in `rrl_table_size`), and however
//! many sources a flood spoofs, the table does not grow.

use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::plan::MAX_UDP_PAYLOAD;
use super::wire::{self, HEADER_LEN, OPT_RECORD_LEN};

/// Settings of the rate limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RrlConfig {
    /// Responses a second per client prefix; 0 turns rate limiting off.
    pub responses_per_second: u32,
    /// Every `slip`-th response over the limit is sent truncated instead of
    /// dropped; 0 never, 1 always.
    pub slip: u8,
    /// Length of the IPv4 prefix a bucket covers.
    pub ipv4_prefix: u8,
    /// Length of the IPv6 prefix a bucket covers.
    pub ipv6_prefix: u8,
    /// Slots of the bucket table (rounded up to a power of two).
    pub table_size: usize,
}

impl Default for RrlConfig {
    fn default() -> Self {
        Self {
            responses_per_second: 0,
            slip: 2,
            ipv4_prefix: 24,
            ipv6_prefix: 56,
            table_size: DEFAULT_TABLE_SIZE,
        }
    }
}

/// Default slots of the bucket table: 512 KiB.
pub const DEFAULT_TABLE_SIZE: usize = 65_536;
/// Largest table accepted: 128 MiB.
pub const MAX_TABLE_SIZE: usize = 1 << 24;
/// Largest slip accepted.
pub const MAX_SLIP: u8 = 100;

/// Time unit of the buckets: 16 ns, so that 56 bits last 36 years.
const UNIT_NS: u64 = 16;
pub(crate) const UNITS_PER_SECOND: u64 = 1_000_000_000 / UNIT_NS;
/// Low bits of a slot holding the slip counter; the rest is the time.
const COUNTER_BITS: u32 = 8;
const COUNTER_MASK: u64 = (1 << COUNTER_BITS) - 1;

/// What to do with one response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limit: answer.
    Answer,
    /// Over the limit: send nothing.
    Drop,
    /// Over the limit, and this one's turn to slip: send a truncated
    /// response.
    Slip,
}

/// The rate limiter shared by the UDP workers.
#[derive(Debug)]
pub struct RateLimiter {
    slots: Box<[AtomicU64]>,
    mask: usize,
    key: u64,
    /// Time units between two responses (1 / rate).
    interval: u64,
    /// How far ahead of now the bucket may run: `rate` responses.
    burst: u64,
    slip: u8,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    start: Instant,
}

impl RateLimiter {
    /// The limiter of `config`, or `None` when rate limiting is off.
    pub fn new(config: &RrlConfig) -> Option<Self> {
        let rate = u64::from(config.responses_per_second);
        if rate == 0 {
            return None;
        }
        let size = config
            .table_size
            .clamp(1, MAX_TABLE_SIZE)
            .next_power_of_two();
        let interval = (UNITS_PER_SECOND / rate).max(1);
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(0);
        Some(Self {
            slots: (0..size).map(|_| AtomicU64::new(0)).collect(),
            mask: size - 1,
            key: hasher.finish(),
            interval,
            burst: interval * rate,
            slip: config.slip,
            ipv4_prefix: config.ipv4_prefix.min(32),
            ipv6_prefix: config.ipv6_prefix.min(128),
            start: Instant::now(),
        })
    }

    /// The limiter's clock, read once per batch of datagrams.
    pub fn now(&self) -> u64 {
        let nanos = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        nanos / UNIT_NS
    }

    /// Takes one response from the bucket of `ip`'s prefix at time `now`
    /// (from [`Self::now`]).
    pub fn check(&self, ip: IpAddr, now: u64) -> Verdict {
        let prefix = Prefix::of(ip, self.ipv4_prefix, self.ipv6_prefix);
        let slot = &self.slots[prefix.hash(self.key) as usize & self.mask];
        let mut current = slot.load(Ordering::Relaxed);
        loop {
            let (next, verdict) = take(current, now, self.interval, self.burst, self.slip);
            if next == current {
                return verdict;
            }
            match slot.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return verdict,
                Err(actual) => current = actual,
            }
        }
    }

    /// The prefix `ip` is counted in, for the log.
    pub fn prefix(&self, ip: IpAddr) -> Prefix {
        Prefix::of(ip, self.ipv4_prefix, self.ipv6_prefix)
    }
}

/// One response from a bucket `slot` at time `now`: the slot's next value
/// and the verdict. A GCRA bucket: the slot's time (`tat`) is when the
/// bucket would be full again; a response moves it `interval` further, and
/// is allowed while that stays within `burst` of now. A refused response
/// leaves the time alone and counts towards the next slip.
fn take(slot: u64, now: u64, interval: u64, burst: u64, slip: u8) -> (u64, Verdict) {
    let tat = slot >> COUNTER_BITS;
    let counter = slot & COUNTER_MASK;
    let next_tat = tat.max(now) + interval;
    if next_tat - now <= burst {
        return ((next_tat << COUNTER_BITS) | counter, Verdict::Answer);
    }
    let counter = counter + 1;
    let (counter, verdict) = match slip {
        0 => (0, Verdict::Drop),
        n if counter >= u64::from(n) => (0, Verdict::Slip),
        _ => (counter, Verdict::Drop),
    };
    ((tat << COUNTER_BITS) | counter, verdict)
}

/// A client prefix: the address with the bits beyond the prefix length
/// cleared (an IPv4-mapped IPv6 address counts as IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// The prefix of `ip`.
    pub fn of(ip: IpAddr, ipv4_prefix: u8, ipv6_prefix: u8) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                let len = ipv4_prefix.min(32);
                let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
                Self {
                    addr: IpAddr::V4((u32::from(v4) & mask).into()),
                    len,
                }
            }
            IpAddr::V6(v6) => {
                let len = ipv6_prefix.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
                Self {
                    addr: IpAddr::V6((u128::from(v6) & mask).into()),
                    len,
                }
            }
        }
    }

    /// The slot hash, keyed so that senders cannot choose prefixes that
    /// share a victim's slot.
    fn hash(&self, key: u64) -> u64 {
        let (high, low) = match self.addr {
            // Apart from IPv6 addresses: the family in the top bit.
            IpAddr::V4(v4) => (1 << 63, u64::from(u32::from(v4))),
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                ((bits >> 64) as u64, bits as u64)
            }
        };
        let mut h = (high ^ key).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 29) ^ low).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^ (h >> 32)
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// Writes the truncated response slipped for `query` into `out` and
/// returns its length: the query's ID, opcode, RD and CD with QR and TC
/// set, rcode NOERROR, and the question when it is one question in plain
/// labels (otherwise none); an OPT record (payload
/// [`MAX_UDP_PAYLOAD`], version 0, DO as asked) when the
/// query has one. No answer, authority or other additional records.
/// `query` is at least a header long.
pub fn write_slip(query: &[u8], out: &mut [u8]) -> usize {
    debug_assert!(query.len() >= HEADER_LEN && out.len() >= HEADER_LEN);
    out[..HEADER_LEN].fill(0);
    out[..2].copy_from_slice(&query[..2]);
    [out[2], out[3]] = wire::response_flags([query[2], query[3]], false, true, 0);
    let [questions, _, _, additionals] = wire::counts(query);
    if questions != 1 {
        return HEADER_LEN;
    }
    let Some(question_end) = wire::plain_question_end(query) else {
        return HEADER_LEN;
    };
    let question = &query[HEADER_LEN..question_end];
    let mut len = HEADER_LEN + question.len();
    if len > out.len() {
        return HEADER_LEN;
    }
    out[HEADER_LEN..len].copy_from_slice(question);
    out[5] = 1;
    // An OPT record first among the additional records: answer with ours.
    if additionals >= 1
        && let Some(opt) = wire::read_opt(&query[question_end..])
        && len + OPT_RECORD_LEN <= out.len()
    {
        out[len..len + OPT_RECORD_LEN].copy_from_slice(&wire::opt_record(
            MAX_UDP_PAYLOAD,
            0,
            opt.dnssec_ok,
        ));
        len += OPT_RECORD_LEN;
        out[11] = 1;
    }
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = UNITS_PER_SECOND;

    fn limiter(rate: u32, slip: u8) -> RateLimiter {
        RateLimiter::new(&RrlConfig {
            responses_per_second: rate,
            slip,
            ..RrlConfig::default()
        })
        .expect("on")
    }

    fn verdicts(rrl: &RateLimiter, ip: &str, now: u64, n: usize) -> Vec<Verdict> {
        let ip: IpAddr = ip.parse().unwrap();
        (0..n).map(|_| rrl.check(ip, now)).collect()
    }

    fn counts(v: &[Verdict]) -> (usize, usize, usize) {
        let n = |x| v.iter().filter(|&&y| y == x).count();
        (n(Verdict::Answer), n(Verdict::Drop), n(Verdict::Slip))
    }

    #[test]
    fn off_by_default_and_at_zero() {
        assert_eq!(RrlConfig::default().responses_per_second, 0);
        assert!(RateLimiter::new(&RrlConfig::default()).is_none());
    }

    #[test]
    fn a_full_bucket_answers_one_second_of_responses_then_refuses() {
        let rrl = limiter(10, 2);
        let v = verdicts(&rrl, "10.1.2.3", 5 * SECOND, 30);
        assert!(v[..10].iter().all(|&x| x == Verdict::Answer), "{v:?}");
        // Over the limit: drop, slip, drop, slip ... (slip 2).
        for (i, x) in v[10..].iter().enumerate() {
            let expected = if i % 2 == 1 {
                Verdict::Slip
            } else {
                Verdict::Drop
            };
            assert_eq!(*x, expected, "response {}", i + 10);
        }
    }

    #[test]
    fn the_bucket_refills_at_the_rate() {
        let rrl = limiter(10, 0);
        let t = 7 * SECOND;
        assert_eq!(counts(&verdicts(&rrl, "10.1.2.3", t, 20)), (10, 10, 0));
        // A tenth of a second later: one more token.
        assert_eq!(
            counts(&verdicts(&rrl, "10.1.2.3", t + SECOND / 10, 5)),
            (1, 4, 0)
        );
        // Half a second: five.
        assert_eq!(
            counts(&verdicts(&rrl, "10.1.2.3", t + SECOND * 6 / 10, 8)),
            (5, 3, 0)
        );
        // Idle for long: never more than a full bucket.
        assert_eq!(
            counts(&verdicts(&rrl, "10.1.2.3", t + 100 * SECOND, 30)),
            (10, 20, 0)
        );
    }

    #[test]
    fn a_steady_sender_gets_the_rate_whatever_it_sends() {
        let rrl = limiter(100, 0);
        let ip: IpAddr = "10.9.9.9".parse().unwrap();
        // 1000 queries a second for 10 s, starting with a full bucket.
        let answered = (0..10_000u64)
            .filter(|i| rrl.check(ip, SECOND + i * SECOND / 1000) == Verdict::Answer)
            .count();
        // 100 in the bucket plus 100 a second.
        assert!((1090..=1110).contains(&answered), "{answered}");
    }

    #[test]
    fn slip_zero_never_slips_and_one_always_does() {
        let never = limiter(5, 0);
        assert_eq!(
            counts(&verdicts(&never, "10.0.0.1", SECOND, 50)),
            (5, 45, 0)
        );
        let always = limiter(5, 1);
        assert_eq!(
            counts(&verdicts(&always, "10.0.0.1", SECOND, 50)),
            (5, 0, 45)
        );
        let third = limiter(5, 3);
        assert_eq!(
            counts(&verdicts(&third, "10.0.0.1", SECOND, 50)),
            (5, 30, 15)
        );
    }

    #[test]
    fn prefixes_share_a_bucket_and_other_prefixes_do_not() {
        let rrl = limiter(10, 0);
        let t = SECOND;
        assert_eq!(counts(&verdicts(&rrl, "127.0.0.1", t, 10)).0, 10);
        // The same /24: the bucket is empty.
        assert_eq!(counts(&verdicts(&rrl, "127.0.0.200", t, 5)).0, 0);
        // As an IPv4-mapped IPv6 address too.
        assert_eq!(counts(&verdicts(&rrl, "::ffff:127.0.0.9", t, 5)).0, 0);
        // Another /24 has its own (unless the hash puts both in one slot).
        assert_eq!(counts(&verdicts(&rrl, "127.0.1.1", t, 10)).0, 10);
        // IPv6: one /56.
        assert_eq!(counts(&verdicts(&rrl, "2001:db8:0:100::1", t, 10)).0, 10);
        assert_eq!(counts(&verdicts(&rrl, "2001:db8:0:1ff::7", t, 5)).0, 0);
        assert_eq!(counts(&verdicts(&rrl, "2001:db8:0:200::1", t, 10)).0, 10);
    }

    #[test]
    fn prefixes_are_masked_to_their_length() {
        let p = |ip: &str, v4, v6| Prefix::of(ip.parse().unwrap(), v4, v6).to_string();
        assert_eq!(p("10.1.2.3", 24, 56), "10.1.2.0/24");
        assert_eq!(p("10.1.2.3", 32, 56), "10.1.2.3/32");
        assert_eq!(p("10.1.2.3", 0, 56), "0.0.0.0/0");
        assert_eq!(p("::ffff:10.1.2.3", 16, 56), "10.1.0.0/16");
        assert_eq!(p("2001:db8:1:2ff:3::4", 24, 56), "2001:db8:1:200::/56");
        assert_eq!(p("2001:db8::1", 24, 128), "2001:db8::1/128");
        assert_eq!(p("2001:db8::1", 24, 0), "::/0");
    }

    #[test]
    fn the_table_is_fixed_however_many_sources_there_are() {
        let rrl = RateLimiter::new(&RrlConfig {
            responses_per_second: 1,
            table_size: 1000,
            ..RrlConfig::default()
        })
        .unwrap();
        assert_eq!(rrl.slots.len(), 1024);
        // 100,000 spoofed /24s, one query each: each is answered unless it
        // lands in a slot an earlier one emptied; the table stays 1024.
        let answered = (0..100_000u32)
            .filter(|i| rrl.check(IpAddr::V4((i << 8).into()), SECOND) == Verdict::Answer)
            .count();
        assert_eq!(answered, 1024, "one per slot");
        assert_eq!(rrl.slots.len(), 1024);
    }

    #[test]
    fn a_slip_is_the_header_and_question_with_tc() {
        // ID 0xabcd, opcode QUERY, RD; CD; one question; an OPT with DO.
        let mut query = vec![0xab, 0xcd, 0x01, 0x10, 0, 1, 0, 0, 0, 0, 0, 1];
        query.extend_from_slice(b"\x03Web\x04Shop\x03svc\x00\x00\x21\x00\x01");
        query.extend_from_slice(&[0, 0, 41, 0x10, 0x00, 0, 0, 0x80, 0, 0, 0]);
        let mut out = [0xffu8; 1232];
        let len = write_slip(&query, &mut out);
        let question_end = 12 + 18;
        assert_eq!(len, question_end + 11);
        assert_eq!(
            &out[..12],
            &[0xab, 0xcd, 0x83, 0x10, 0, 1, 0, 0, 0, 0, 0, 1]
        );
        assert_eq!(&out[12..question_end], &query[12..question_end]);
        assert_eq!(
            &out[question_end..len],
            &[0, 0, 41, 0x04, 0xd0, 0, 0, 0x80, 0, 0, 0]
        );
        // It reads as a message: TC, the question, no records.
        let message = hickory_proto::op::Message::from_vec(&out[..len]).unwrap();
        assert!(message.metadata.truncation);
        assert_eq!(message.queries.len(), 1);
        assert!(message.answers.is_empty() && message.authorities.is_empty());
        assert_eq!(message.edns.as_ref().map(|e| e.max_payload()), Some(1232));

        // Without EDNS: no OPT.
        query[11] = 0;
        query.truncate(question_end);
        assert_eq!(write_slip(&query, &mut out), question_end);
        assert_eq!(out[11], 0);
        // A question that does not read plainly: the header alone.
        let mut compressed = query[..12].to_vec();
        compressed.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1]);
        assert_eq!(write_slip(&compressed, &mut out), 12);
        assert_eq!(
            &out[..12],
            &[0xab, 0xcd, 0x83, 0x10, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        // Another opcode is kept.
        let mut notify = query.clone();
        notify[2] = 4 << 3;
        write_slip(&notify, &mut out);
        assert_eq!(out[2], 0x80 | (4 << 3) | 0x02);
    }
}
