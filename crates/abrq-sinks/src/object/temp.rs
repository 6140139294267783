//! Temporary names for the engines that write beside the target and rename
//! into place (local, ftp, ftps), and recognising the ones a stopped
//! process left behind.
//!
//! `.{final name}.tmp-{created}-{random}`: a dot name, so consumers globbing
//! for `part-*` never pick one up; `created` (milliseconds since the epoch,
//! hex, this host's clock) so a later process can tell a leftover from a
//! write in flight; random, so attempts never clash. A process killed
//! mid-write, or cut off from an FTP server before it could clean up,
//! leaves such a file; the next process removes it from each directory it
//! writes into (see [`is_leftover`]).

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MARK: &str = ".tmp-";

/// When this process began: every temp file it makes is younger.
static STARTED: LazyLock<SystemTime> = LazyLock::new(SystemTime::now);

/// A fresh temporary name for a file to be renamed to `final_name`.
pub fn temp_name(final_name: &str) -> String {
    // Fix the start before the first temp file exists.
    LazyLock::force(&STARTED);
    format!(
        ".{final_name}{MARK}{:x}-{:08x}",
        millis(SystemTime::now()),
        rand::random::<u32>()
    )
}

/// Whether `name` (a file name, no directory) is a temporary file made by
/// an earlier process: made before this one started, so no write of this
/// process can still rename it. Names from before creation times were
/// recorded (`.{name}.tmp-{16 hex}`) count as leftovers too.
pub fn is_leftover(name: &str) -> bool {
    made_before(name, *STARTED)
}

fn made_before(name: &str, cutoff: SystemTime) -> bool {
    let Some(tail) = name
        .strip_prefix('.')
        .and_then(|n| n.rsplit_once(MARK))
        .map(|(_, tail)| tail)
    else {
        return false;
    };
    let hex = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_hexdigit());
    match tail.split_once('-') {
        Some((created, random)) if hex(created) && hex(random) => {
            u64::from_str_radix(created, 16).is_ok_and(|ms| ms < millis(cutoff))
        }
        // the older form: random only
        None => tail.len() == 16 && hex(tail),
        _ => false,
    }
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_name_is_not_a_leftover_and_an_older_one_is() {
        let name = temp_name("part-0123456789abcdef.jsonl.gz");
        assert!(
            name.starts_with(".part-0123456789abcdef.jsonl.gz.tmp-"),
            "{name}"
        );
        assert!(!is_leftover(&name));
        let now = SystemTime::now();
        assert!(made_before(&name, now + Duration::from_secs(1)));
        let old = format!(
            ".part-1.csv.tmp-{:x}-0000beef",
            millis(now - Duration::from_secs(3600))
        );
        assert!(is_leftover(&old));
        assert!(is_leftover(".part-1.csv.tmp-0123456789abcdef"));
    }

    #[test]
    fn only_temporary_names_are_ever_leftovers() {
        for name in [
            "part-1.jsonl",
            "part-1.jsonl.tmp-1-2",
            ".hidden",
            ".part-1.tmp-",
            ".part-1.tmp-xyz-1",
            ".part-1.tmp-1-",
            ".part-1.tmp-0123",
        ] {
            assert!(!made_before(name, SystemTime::now()), "{name}");
        }
    }
}
