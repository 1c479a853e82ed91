//! Bucket boundaries per schema and iteration over a histogram's buckets.
//!
//! Exponential schema `s`: bucket `i` covers `(base^(i-1), base^i]` with `base = 2^(2^-s)`
//! (negative bucket `i` the mirror image, `[-base^i, -base^(i-1))`). Custom schema (-53): bucket
//! `i` covers `(custom_values[i-1], custom_values[i]]`, the first from -Inf, the one past the last
//! bound up to +Inf. The bounds are Prometheus' to the last bit (`getBoundExponential`):
//! fractions from the same table, scaled by powers of two as Go's `math.Ldexp` does.

use super::types::{is_custom_schema, Histogram, Span, MAX_EXPONENTIAL_SCHEMA, MIN_EXPONENTIAL_SCHEMA};

/// The upper bound of bucket `index` (the lower bound is that of `index - 1`): the custom bound
/// for schema -53 (+Inf from `custom_values.len()` on, -Inf at -1 and below), else
/// [`exponential_bound`].
pub fn bucket_bound(index: i32, schema: i32, custom_values: &[f64]) -> f64 {
    if !is_custom_schema(schema) {
        return exponential_bound(index, schema);
    }
    match usize::try_from(index) {
        Ok(i) => custom_values.get(i).copied().unwrap_or(f64::INFINITY),
        Err(_) => f64::NEG_INFINITY,
    }
}

/// The upper bound of exponential bucket `index` in `schema`, `base^index` computed as
/// Prometheus does; NaN for a schema outside `-4..=8`. The last finite bucket ends at
/// `f64::MAX` (not +Inf, which belongs to the bucket of infinite observations).
pub fn exponential_bound(index: i32, schema: i32) -> f64 {
    if !(MIN_EXPONENTIAL_SCHEMA..=MAX_EXPONENTIAL_SCHEMA).contains(&schema) {
        return f64::NAN;
    }
    if schema < 0 {
        let exp = i64::from(index) << -schema;
        if exp == 1024 {
            return f64::MAX;
        }
        return ldexp(1.0, exp);
    }
    let frac_index = (index & ((1 << schema) - 1)) << (MAX_EXPONENTIAL_SCHEMA - schema);
    let frac = FRACTIONS.get(frac_index as usize).copied().unwrap_or(f64::NAN);
    let exp = i64::from(index >> schema) + 1;
    if frac == 0.5 && exp == 1025 {
        return f64::MAX;
    }
    ldexp(frac, exp)
}

/// `frac * 2^exp` for a normal `frac`, rounded once, as Go's `math.Ldexp` does (results below
/// the normal range are built 53 binary places higher and scaled down by one multiplication).
fn ldexp(frac: f64, exp: i64) -> f64 {
    if frac == 0.0 || !frac.is_finite() {
        return frac;
    }
    let bits = frac.to_bits();
    let e = exp + ((bits >> 52) & 0x7ff) as i64 - 1023;
    if e < -1075 {
        return 0.0f64.copysign(frac);
    }
    if e > 1023 {
        return f64::INFINITY.copysign(frac);
    }
    let (e, scale) = if e < -1022 { (e + 53, 1.0 / (1u64 << 53) as f64) } else { (e, 1.0) };
    let bits = (bits & !(0x7ff << 52)) | (((e + 1023) as u64) << 52);
    scale * f64::from_bits(bits)
}

/// The index in `target` schema of the bucket holding bucket `index` of schema `origin`
/// (`target <= origin`): Prometheus' `targetIdx`, `((index - 1) >> (origin - target)) + 1`.
pub fn target_index(index: i32, origin: i32, target: i32) -> i32 {
    let shift = u32::try_from(origin.saturating_sub(target)).unwrap_or(0).min(31);
    (index.wrapping_sub(1) >> shift).wrapping_add(1)
}

/// The bucket indices and counts of one side, in span order. Stops early, without complaint,
/// where spans and counts disagree (only an invalid histogram has that).
#[derive(Clone, Debug)]
pub(crate) struct Entries<'a> {
    spans: std::slice::Iter<'a, Span>,
    counts: std::slice::Iter<'a, f64>,
    /// Index of the next bucket.
    next: i32,
    /// Buckets left in the current span.
    left: u32,
    started: bool,
}

impl<'a> Entries<'a> {
    /// The buckets of `spans` with `counts`.
    pub(crate) fn new(spans: &'a [Span], counts: &'a [f64]) -> Self {
        Self { spans: spans.iter(), counts: counts.iter(), next: 0, left: 0, started: false }
    }
}

impl Iterator for Entries<'_> {
    type Item = (i32, f64);

    fn next(&mut self) -> Option<(i32, f64)> {
        while self.left == 0 {
            let span = self.spans.next()?;
            self.next = if self.started { self.next.wrapping_add(span.offset) } else { span.offset };
            self.started = true;
            self.left = span.length;
        }
        let count = *self.counts.next()?;
        let index = self.next;
        self.next = self.next.wrapping_add(1);
        self.left -= 1;
        Some((index, count))
    }
}

/// One bucket with its bounds. Exponential buckets include the bound farther from zero;
/// custom buckets include their upper bound (and the first also its lower bound, -Inf).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bucket {
    /// Lower bound.
    pub lower: f64,
    /// Upper bound.
    pub upper: f64,
    /// Observations in the bucket.
    pub count: f64,
    /// Whether `lower` belongs to the bucket.
    pub lower_inclusive: bool,
    /// Whether `upper` belongs to the bucket.
    pub upper_inclusive: bool,
    /// Index within the schema and side (irrelevant for the zero bucket).
    pub index: i32,
}

impl Bucket {
    fn new(index: i32, count: f64, positive: bool, h: &Histogram) -> Self {
        let outer = bucket_bound(index, h.schema, &h.custom_values);
        let inner = bucket_bound(index.wrapping_sub(1), h.schema, &h.custom_values);
        let (lower, upper) = if positive { (inner, outer) } else { (-outer, -inner) };
        let (lower_inclusive, upper_inclusive) =
            if h.uses_custom_buckets() { (index == 0, true) } else { (lower < 0.0, upper > 0.0) };
        Self { lower, upper, count, lower_inclusive, upper_inclusive, index }
    }
}

impl Histogram {
    /// The positive buckets, ascending (empty ones included).
    pub fn positive_bucket_iter(&self) -> impl Iterator<Item = Bucket> + '_ {
        Entries::new(&self.positive_spans, &self.positive_buckets).map(|(i, c)| Bucket::new(i, c, true, self))
    }

    /// The negative buckets from zero downwards (ascending index, descending value).
    pub fn negative_bucket_iter(&self) -> impl Iterator<Item = Bucket> + '_ {
        Entries::new(&self.negative_spans, &self.negative_buckets).map(|(i, c)| Bucket::new(i, c, false, self))
    }

    /// The zero bucket, `[-zero_threshold, zero_threshold]`.
    pub fn zero_bucket(&self) -> Bucket {
        Bucket {
            lower: -self.zero_threshold,
            upper: self.zero_threshold,
            count: self.zero_count,
            lower_inclusive: true,
            upper_inclusive: true,
            index: 0,
        }
    }

    /// Every bucket in ascending order of value, as Prometheus' `AllBucketIterator`: negative
    /// buckets (descending index), the zero bucket when its count is above 0 (never for custom
    /// buckets), positive buckets (ascending index). A bucket overlapping the zero bucket has
    /// that bound moved to the zero threshold.
    pub fn all_buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        let zt = self.zero_threshold;
        let clamp = move |mut b: Bucket| {
            if b.upper < 0.0 && b.upper > -zt {
                b.upper = -zt;
            } else if b.lower > 0.0 && b.lower < zt {
                b.lower = zt;
            }
            b
        };
        let negative: Vec<Bucket> = self.negative_bucket_iter().map(clamp).collect();
        let zero = (self.zero_count > 0.0 && !self.uses_custom_buckets()).then(|| self.zero_bucket());
        negative.into_iter().rev().chain(zero).chain(self.positive_bucket_iter().map(clamp))
    }
}

/// Prometheus' bucket bound fractions in `[0.5, 1)` for schema 8: entry `j` is
/// `2^(j/256 - 1)` as Prometheus (and client_golang) tabulate it, which is up to 4 ulps below
/// the correctly rounded value; schema `s < 8` uses every `2^(8-s)`th entry. These are data that
/// must match Prometheus bit for bit (bucket keys and quantiles depend on them), so they are
/// reproduced, not recomputed.
#[rustfmt::skip]
const FRACTIONS: [f64; 256] = [
    0.5, 0.5013556375251013, 0.5027149505564014, 0.5040779490592088,
    0.5054446430258502, 0.5068150424757447, 0.5081891574554764, 0.509566998038869,
    0.5109485743270583, 0.5123338964485679, 0.5137229745593818, 0.5151158188430205,
    0.5165124395106142, 0.5179128468009786, 0.5193170509806894, 0.520725062344158,
    0.5221368912137069, 0.5235525479396449, 0.5249720429003435, 0.526395386502313,
    0.5278225891802786, 0.5292536613972564, 0.5306886136446309, 0.5321274564422321,
    0.5335702003384117, 0.5350168559101208, 0.5364674337629877, 0.5379219445313954,
    0.5393803988785598, 0.5408428074966075, 0.5423091811066545, 0.5437795304588847,
    0.5452538663326288, 0.5467321995364429, 0.5482145409081883, 0.549700901315111,
    0.5511912916539204, 0.5526857228508706, 0.5541842058618393, 0.5556867516724088,
    0.5571933712979462, 0.5587040757836845, 0.5602188762048033, 0.5617377836665098,
    0.5632608093041209, 0.564787964283144, 0.5663192597993595, 0.5678547070789026,
    0.5693943173783458, 0.5709381019847808, 0.572486072215902, 0.5740382394200894,
    0.5755946149764913, 0.5771552102951081, 0.5787200368168754, 0.5802891060137493,
    0.5818624293887887, 0.5834400184762408, 0.585021884841625, 0.5866080400818185,
    0.5881984958251406, 0.5897932637314379, 0.5913923554921704, 0.5929957828304968,
    0.5946035575013605, 0.5962156912915756, 0.5978321960199137, 0.5994530835371903,
    0.6010783657263515, 0.6027080545025619, 0.6043421618132907, 0.6059806996384005,
    0.6076236799902344, 0.6092711149137041, 0.6109230164863786, 0.6125793968185725,
    0.6142402680534349, 0.6159056423670379, 0.6175755319684665, 0.6192499490999082,
    0.620928906036742, 0.622612415087629, 0.6243004885946023, 0.6259931389331581,
    0.6276903785123455, 0.6293922197748583, 0.6310986751971253, 0.6328097572894031,
    0.6345254785958666, 0.6362458516947014, 0.637970889198196, 0.6397006037528346,
    0.6414350080393891, 0.6431741147730128, 0.6449179367033329, 0.6466664866145447,
    0.6484197773255048, 0.6501778216898253, 0.6519406325959679, 0.6537082229673385,
    0.6554806057623822, 0.6572577939746774, 0.659039800633032, 0.6608266388015788,
    0.6626183215798706, 0.6644148621029772, 0.6662162735415805, 0.6680225691020727,
    0.6698337620266515, 0.6716498655934177, 0.6734708931164728, 0.6752968579460171,
    0.6771277734684463, 0.6789636531064505, 0.6808045103191123, 0.6826503586020058,
    0.6845012114872953, 0.6863570825438342, 0.688217985377265, 0.690083933630119,
    0.6919549409819159, 0.6938310211492645, 0.6957121878859629, 0.6975984549830999,
    0.6994898362691555, 0.7013863456101023, 0.7032879969095076, 0.7051948041086352,
    0.7071067811865475, 0.7090239421602076, 0.7109463010845827, 0.7128738720527471,
    0.7148066691959849, 0.7167447066838943, 0.718687998724491, 0.7206365595643126,
    0.7225904034885232, 0.7245495448210174, 0.7265139979245261, 0.7284837772007218,
    0.7304588970903234, 0.7324393720732029, 0.7344252166684908, 0.7364164454346837,
    0.7384130729697496, 0.7404151139112358, 0.7424225829363761, 0.7444354947621984,
    0.7464538641456323, 0.7484777058836176, 0.7505070348132126, 0.7525418658117031,
    0.7545822137967112, 0.7566280937263048, 0.7586795205991071, 0.7607365094544071,
    0.762799075372269, 0.7648672334736434, 0.7669409989204777, 0.7690203869158282,
    0.7711054127039704, 0.7731960915705107, 0.7752924388424999, 0.7773944698885442,
    0.7795022001189185, 0.7816156449856788, 0.7837348199827764, 0.7858597406461707,
    0.7879904225539431, 0.7901268813264122, 0.7922691326262467, 0.7944171921585818,
    0.7965710756711334, 0.7987307989543135, 0.8008963778413465, 0.8030678282083853,
    0.805245165974627, 0.8074284071024302, 0.8096175675974316, 0.8118126635086642,
    0.8140137109286738, 0.8162207259936375, 0.8184337248834821, 0.820652723822003,
    0.8228777390769823, 0.8251087869603088, 0.8273458838280969, 0.8295890460808079,
    0.8318382901633681, 0.8340936325652911, 0.8363550898207981, 0.8386226785089391,
    0.8408964152537144, 0.8431763167241966, 0.8454623996346523, 0.8477546807446661,
    0.8500531768592616, 0.8523579048290255, 0.8546688815502312, 0.8569861239649629,
    0.8593096490612387, 0.8616394738731368, 0.8639756154809185, 0.8663180910111553,
    0.8686669176368529, 0.871022112577578, 0.8733836930995842, 0.8757516765159389,
    0.8781260801866495, 0.8805069215187917, 0.8828942179666361, 0.8852879870317771,
    0.8876882462632604, 0.890095013257712, 0.8925083056594671, 0.8949281411607002,
    0.8973545375015533, 0.8997875124702672, 0.9022270839033115, 0.9046732696855155,
    0.9071260877501991, 0.909585556079304, 0.9120516927035263, 0.9145245157024483,
    0.9170040432046711, 0.9194902933879467, 0.9219832844793128, 0.9244830347552253,
    0.9269895625416926, 0.92950288621441, 0.9320230241988943, 0.9345499949706191,
    0.9370838170551498, 0.93962450902828, 0.9421720895161669, 0.9447265771954693,
    0.9472879907934827, 0.9498563490882775, 0.9524316709088368, 0.9550139751351947,
    0.9576032806985735, 0.9601996065815236, 0.9628029718180622, 0.9654133954938133,
    0.9680308967461471, 0.9706554947643201, 0.9732872087896164, 0.9759260581154889,
    0.9785720620876999, 0.9812252401044634, 0.9838856116165875, 0.9865531961276168,
    0.9892280131939752, 0.9919100824251095, 0.9945994234836328, 0.9972960560854698,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_bounds_match_independent_values() {
        // Exact powers of two.
        assert_eq!(exponential_bound(0, 0), 1.0);
        assert_eq!(exponential_bound(1, 0), 2.0);
        assert_eq!(exponential_bound(-1, 0), 0.5);
        assert_eq!(exponential_bound(8, 3), 2.0);
        assert_eq!(exponential_bound(1, -2), 16.0);
        assert_eq!(exponential_bound(-3, -4), 2f64.powi(-48));
        // sqrt(2) in schema 1, as Prometheus tabulates it (one ulp below sqrt(2)).
        assert_eq!(exponential_bound(1, 1), f64::from_bits(std::f64::consts::SQRT_2.to_bits() - 1));
        assert!((exponential_bound(1, 1) - 2f64.sqrt()).abs() <= f64::EPSILON * 2.0);
        // Schema 3, index 5: 2^(5/8) = 1.5422108254079407...
        assert!((exponential_bound(5, 3) - 1.542_210_825_407_940_8).abs() < 1e-15);
        assert!((exponential_bound(-13, 3) - 2f64.powf(-13.0 / 8.0)).abs() < 1e-15);
        // Schema 8, index 300: 2^(300/256).
        assert!((exponential_bound(300, 8) / 2f64.powf(300.0 / 256.0) - 1.0).abs() < 1e-15);
        // Edges: the last finite bucket ends at f64::MAX, the next one at +Inf.
        assert_eq!(exponential_bound(1024, 0), f64::MAX);
        assert_eq!(exponential_bound(1025, 0), f64::INFINITY);
        assert_eq!(exponential_bound(1024 << 8, 8), f64::MAX);
        assert_eq!(exponential_bound(64, -4), f64::MAX);
        assert_eq!(exponential_bound(-1074, 0), f64::from_bits(1));
        assert_eq!(exponential_bound(-1075, 0), 0.0);
        assert!(exponential_bound(0, 9).is_nan());
    }

    #[test]
    fn fractions_are_within_4_ulps_of_the_exact_powers() {
        let mut prev = 0.0;
        for (j, &f) in FRACTIONS.iter().enumerate() {
            assert!(f > prev);
            prev = f;
            let exact = 2f64.powf(j as f64 / 256.0 - 1.0);
            assert!((f - exact).abs() <= 5.0 * f64::EPSILON / 2.0, "entry {j}: {f} vs {exact}");
        }
    }

    #[test]
    fn custom_bounds() {
        let cv = [1.0, 2.5, 10.0];
        assert_eq!(bucket_bound(-1, -53, &cv), f64::NEG_INFINITY);
        assert_eq!(bucket_bound(0, -53, &cv), 1.0);
        assert_eq!(bucket_bound(2, -53, &cv), 10.0);
        assert_eq!(bucket_bound(3, -53, &cv), f64::INFINITY);
        assert_eq!(bucket_bound(7, -53, &cv), f64::INFINITY);
    }

    #[test]
    fn target_index_halves_per_schema_step() {
        assert_eq!(target_index(1, 1, 0), 1);
        assert_eq!(target_index(2, 1, 0), 1);
        assert_eq!(target_index(3, 1, 0), 2);
        assert_eq!(target_index(0, 1, 0), 0);
        assert_eq!(target_index(-1, 1, 0), 0);
        assert_eq!(target_index(-2, 1, 0), -1);
        assert_eq!(target_index(i32::MIN, 8, -4), target_index(i32::MIN, 8, -4));
    }

    #[test]
    fn all_buckets_in_ascending_order_with_zero_bucket() {
        let h = Histogram {
            schema: 0,
            zero_threshold: 0.001,
            zero_count: 2.0,
            positive_spans: vec![Span { offset: 0, length: 2 }],
            positive_buckets: vec![1.0, 3.0],
            negative_spans: vec![Span { offset: 1, length: 1 }],
            negative_buckets: vec![4.0],
            ..Histogram::default()
        };
        let got: Vec<_> =
            h.all_buckets().map(|b| (b.lower, b.upper, b.count, b.lower_inclusive, b.upper_inclusive)).collect();
        assert_eq!(
            got,
            vec![
                (-2.0, -1.0, 4.0, true, false),
                (-0.001, 0.001, 2.0, true, true),
                (0.5, 1.0, 1.0, false, true),
                (1.0, 2.0, 3.0, false, true),
            ]
        );
        let nhcb = Histogram {
            schema: -53,
            custom_values: vec![1.0, 5.0],
            positive_spans: vec![Span { offset: 0, length: 1 }, Span { offset: 1, length: 1 }],
            positive_buckets: vec![1.0, 2.0],
            ..Histogram::default()
        };
        let got: Vec<_> = nhcb.all_buckets().map(|b| (b.lower, b.upper, b.lower_inclusive)).collect();
        assert_eq!(got, vec![(f64::NEG_INFINITY, 1.0, true), (5.0, f64::INFINITY, false)]);
    }
}
