//! The table of medians and the ratio three / one, and each run's line.

use super::{RunResult, ScaleOutArgs, DESTINATIONS, STREAMS};

/// What one run measured, on one line.
pub(super) fn run_line(n: usize, r: &RunResult, proxied: bool) -> String {
    let spread = r
        .spread_secs
        .map_or("never".to_string(), |s| format!("{s:.1} s"));
    let trips = match proxied {
        true => (r.round_trips / (STREAMS * DESTINATIONS) as u64).to_string(),
        false => "-".to_string(),
    };
    let held: Vec<String> = r.held.iter().map(|(n, c)| format!("{n}={c}")).collect();
    let wrong = match r.wrong_rows.is_empty() {
        true => String::new(),
        false => format!("; WRONG ROW COUNTS: {}", r.wrong_rows.join(", ")),
    };
    let idle = r.idle.map_or(String::new(), |(tps, open, cores)| {
        format!(
            "; at rest: {tps:.1} state transactions/s, {open} state connections open, \
             postgres {:.1} % of a core",
            cores * 100.0
        )
    });
    format!(
        "{n} process{} {:.0} records/s ({:.1} s; leases spread {spread}; staged {:.1} s; \
         {trips} round trips per drain; CPU abrq {:.1} s, postgres {:.1} s, machine {:.0}% busy; \
         state connections {} open, {:.1} busy on average; {} lease claims; held {}{idle}){wrong}",
        if n == 1 { "" } else { "es" },
        r.rate,
        r.secs,
        r.staged_secs,
        r.cpu_secs,
        r.server_cpu_secs,
        r.busy * 100.0,
        r.state_open_max,
        r.state_busy_mean,
        r.claims,
        held.join(" "),
    )
}

pub(super) fn report(a: &ScaleOutArgs, delay: u64, one: &[RunResult], many: &[RunResult]) {
    let med =
        |rs: &[RunResult], f: &dyn Fn(&RunResult) -> f64| crate::median(rs.iter().map(f).collect());
    let range = |rs: &[RunResult], f: &dyn Fn(&RunResult) -> f64| {
        let xs: Vec<f64> = rs.iter().map(f).collect();
        let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let drains = (STREAMS * DESTINATIONS) as f64;
    let what = match delay {
        0 => "no added latency".to_string(),
        ms => format!("{ms} ms per request"),
    };
    let cap = a
        .cpu_cap
        .map_or(String::new(), |c| format!(", {c} cores per process"));
    println!();
    println!(
        "| {STREAMS} streams x {} records, batches of {}, {} {} destinations, {what}{cap} | \
         records/s delivered (median of {}) | min-max | wall s | leases spread s | sources staged s | \
         round trips per drain | x {delay} ms | CPU s: abrq / postgres | machine busy | state connections open (max) / busy (mean, max) | lease claims |",
        a.records,
        a.max_records,
        STREAMS * DESTINATIONS,
        a.destinations.label(),
        a.rounds
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (label, rs) in [
        ("one `abrq run`".to_string(), one),
        (
            format!("{} `abrq run`, same config, shared state", a.processes),
            many,
        ),
    ] {
        let (lo, hi) = range(rs, &|r| r.rate);
        let trips = med(rs, &|r| r.round_trips as f64) / drains;
        let spread = rs.iter().filter_map(|r| r.spread_secs).collect::<Vec<_>>();
        println!(
            "| {label} | {:.0} | {lo:.0}-{hi:.0} | {:.2} | {} | {:.2} | {} | {} | {:.1} / {:.1} | {:.0} % | {:.0} / {:.1}, {:.0} | {:.0} |",
            med(rs, &|r| r.rate),
            med(rs, &|r| r.secs),
            match spread.len() == rs.len() {
                true => format!("{:.2}", crate::median(spread)),
                false => format!("{} of {} runs", spread.len(), rs.len()),
            },
            med(rs, &|r| r.staged_secs),
            match delay {
                0 => "-".to_string(),
                _ => format!("{trips:.0}"),
            },
            match delay {
                0 => "-".to_string(),
                ms => format!("{:.2} s", trips * ms as f64 / 1000.0),
            },
            med(rs, &|r| r.cpu_secs),
            med(rs, &|r| r.server_cpu_secs),
            med(rs, &|r| r.busy) * 100.0,
            med(rs, &|r| r.state_open_max as f64),
            med(rs, &|r| r.state_busy_mean),
            med(rs, &|r| r.state_busy_max as f64),
            med(rs, &|r| r.claims as f64),
        );
    }
    let ratios: Vec<f64> = one.iter().zip(many).map(|(o, m)| m.rate / o.rate).collect();
    let (lo, hi) = (
        ratios.iter().cloned().fold(f64::INFINITY, f64::min),
        ratios.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    );
    let ratio = med(many, &|r| r.rate) / med(one, &|r| r.rate);
    let target = match (a.cpu_cap, delay) {
        (Some(_), _) => "capped processes, target >= 2.5",
        (None, 0) => "CPU-bound, no target",
        _ => "target >= 2.5 with 20 ms",
    };
    println!(
        "| **ratio** {} / one ({target}) | **{ratio:.2}** | per round {lo:.2}-{hi:.2} | | | | | | | | | |",
        a.processes
    );
    let wrong: Vec<&String> = one.iter().chain(many).flat_map(|r| &r.wrong_rows).collect();
    if !wrong.is_empty() {
        println!(
            "WARNING: {} table(s) did not hold exactly their stream's records: {wrong:?}",
            wrong.len()
        );
    }
    println!();
    println!(
        "scale-out ({what}): {} processes / one = {ratio:.2}x (median of {} rounds: {:.0} vs {:.0} records/s delivered; per-round ratios {lo:.2}-{hi:.2})",
        a.processes,
        a.rounds,
        med(many, &|r| r.rate),
        med(one, &|r| r.rate),
    );
}
