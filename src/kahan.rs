//! Kahan-Neumaier compensated summation, as Prometheus sums floats (`kahansum.Inc`): PromQL's
//! rollups and aggregations and histogram arithmetic add with it, so that their sums match
//! Prometheus' to the last bits.

/// One step: adds `inc` to the running `sum` with compensation `c`, returning the new sum and
/// compensation (the result is `sum + c`). An infinite sum resets the compensation.
pub fn kahan_inc(inc: f64, sum: f64, c: f64) -> (f64, f64) {
    let t = sum + inc;
    let c = if t.is_infinite() {
        0.0
    } else if sum.abs() >= inc.abs() {
        c + ((sum - t) + inc)
    } else {
        c + ((inc - t) + sum)
    };
    (t, c)
}
