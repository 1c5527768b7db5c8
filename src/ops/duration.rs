//! Durations as every subcommand, environment variable and configuration
//! file writes them: a whole number with a unit (`500ms`, `30s`, `5m`,
//! `1h`, `90d`), or a plain number of seconds, which is what the DNS server's
//! options took before units were accepted.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The units, largest first (the order [`format`] tries them in).
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Parses `500ms`, `30s`, `5m`, `1h`, `90d`, or plain seconds (`30`).
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let Ok(value) = number.parse::<u64>() else {
        return Err(format!(
            "{text:?} is not a duration: a whole number with a unit (500ms, 30s, 5m, 1h, 90d) or plain seconds"
        ));
    };
    let Some((_, millis)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(format!(
            "{text:?}: unknown unit {unit:?} (the units are ms, s, m, h and d)"
        ));
    };
    value
        .checked_mul(*millis)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long a duration"))
}

/// Writes `duration` in the largest unit that keeps it whole (`5m`, `90s`,
/// `1500ms`); [`parse`] reads it back to the millisecond.
pub fn format(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis == 0 {
        return "0s".into();
    }
    let (name, size) = UNITS
        .iter()
        .map(|(name, size)| (name, u128::from(*size)))
        .find(|(_, size)| millis.is_multiple_of(*size))
        .expect("every whole number of milliseconds is a multiple of 1ms");
    format!("{}{name}", millis / size)
}

/// A duration option: parsed by [`parse`] from the command line and the
/// environment (clap uses [`FromStr`]), and from a configuration file,
/// where it may also be a TOML integer of seconds. It serializes as
/// [`format()`] writes it, which is also how `--help` shows a default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl From<Duration> for HumanDuration {
    fn from(duration: Duration) -> Self {
        Self(duration)
    }
}

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        parse(text).map(Self)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(self.0))
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: a string like \"500ms\", \"30s\", \"5m\", \"1h\", or an integer of seconds")
            }

            fn visit_u64<E: serde::de::Error>(self, seconds: u64) -> Result<HumanDuration, E> {
                Ok(HumanDuration(Duration::from_secs(seconds)))
            }

            fn visit_i64<E: serde::de::Error>(self, seconds: i64) -> Result<HumanDuration, E> {
                u64::try_from(seconds)
                    .map(|seconds| HumanDuration(Duration::from_secs(seconds)))
                    .map_err(|_| E::custom(format!("{seconds} is not a duration: negative")))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<HumanDuration, E> {
                text.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_plain_seconds_parse() {
        assert_eq!(parse("300"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("300s"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse(" 7s "), Ok(Duration::from_secs(7)));
    }

    #[test]
    fn malformed_durations_are_refused_saying_why() {
        for (text, why) in [
            ("5 minutes", "unknown unit"),
            ("5x", "unknown unit"),
            ("5M", "unknown unit"),
            ("m", "is not a duration"),
            ("", "is not a duration"),
            ("-5s", "is not a duration"),
            ("1.5s", "unknown unit"),
            ("18446744073709551615h", "too long"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }

    #[test]
    fn formatting_picks_the_largest_whole_unit_and_parses_back() {
        for (millis, text) in [
            (0, "0s"),
            (250, "250ms"),
            (1_500, "1500ms"),
            (5_000, "5s"),
            (90_000, "90s"),
            (300_000, "5m"),
            (7_200_000, "2h"),
        ] {
            let duration = Duration::from_millis(millis);
            assert_eq!(format(duration), text);
            assert_eq!(parse(text), Ok(duration));
        }
    }

    #[test]
    fn a_configuration_file_may_write_seconds_or_units() {
        #[derive(Deserialize)]
        struct File {
            wait: HumanDuration,
        }
        let wait = |toml_text: &str| toml::from_str::<File>(toml_text).map(|f| f.wait.0);
        assert_eq!(wait("wait = 5").unwrap(), Duration::from_secs(5));
        assert_eq!(wait("wait = \"5\"").unwrap(), Duration::from_secs(5));
        assert_eq!(
            wait("wait = \"500ms\"").unwrap(),
            Duration::from_millis(500)
        );
        let error = wait("wait = \"5x\"").unwrap_err().to_string();
        assert!(
            error.contains("unknown unit") && error.contains("wait"),
            "{error}"
        );
        assert!(wait("wait = -1").is_err());
        assert!(wait("wait = 1.5").is_err());
        // What serializing writes, deserializing reads.
        let json = serde_json::to_value(HumanDuration(Duration::from_millis(1500))).unwrap();
        assert_eq!(json, serde_json::json!("1500ms"));
        let back: HumanDuration = serde_json::from_value(json).unwrap();
        assert_eq!(back.0, Duration::from_millis(1500));
    }
}
