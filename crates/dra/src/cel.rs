//! CEL device selectors (`DeviceClass.spec.selectors`,
//! `requests[].exactly.selectors`), evaluated against one device at a time
//! as v1.37's `k8s.io/dynamic-resource-allocation/cel` does.
//!
//! The expression sees one variable, `device`, with `driver` (string),
//! `allowMultipleAllocations` (bool), `attributes` and `capacity` (maps
//! from a domain to a map from a name to the value; an unknown domain is an
//! empty map, so `has(device.attributes["x.example.com"].model)` is false
//! rather than an error). Attribute values are ints, bools, strings and
//! versions (semver objects); capacities are quantities. Kubernetes' CEL
//! libraries that selectors use are added on top of the standard ones: the
//! `quantity` and `semver` libraries and the strings extension.
//!
//! Expressions are compiled once and cached by source ([`Cache`]).

use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex};

use cel::common::traits::Indexer;
use cel::common::types::{CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Context, Env, ExecutionError, Program, Value};
use rkube_model::dra::AttrValue;
use rkube_model::Quantity;

use crate::semver::Version;

/// The longest selector the API server accepts
/// (`CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_LENGTH: usize = 10 * 1024;

static QUANTITY_TYPE: LazyLock<Type> =
    LazyLock::new(|| Type::new_opaque_type("kubernetes.Quantity"));
static SEMVER_TYPE: LazyLock<Type> = LazyLock::new(|| Type::new_opaque_type("kubernetes.Semver"));

/// A `quantity` value.
#[derive(Debug, Clone, PartialEq)]
pub struct CelQuantity(pub Quantity);

impl Val for CelQuantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }
    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<CelQuantity>()
            .is_some_and(|o| self.0.cmp_value(&o.0) == Ordering::Equal)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for CelQuantity {}

/// A `semver` value.
#[derive(Debug, Clone, PartialEq)]
pub struct CelSemver(pub Version);

impl Val for CelSemver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }
    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<CelSemver>()
            .is_some_and(|o| self.0.cmp(&o.0) == Ordering::Equal)
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for CelSemver {}

/// A string-keyed map of values; with `lenient`, an unknown key reads as
/// an empty map (the attributes and capacity maps' domains).
#[derive(Debug, Default)]
struct Record {
    entries: BTreeMap<String, Box<dyn Val>>,
    lenient: bool,
}

static EMPTY: LazyLock<Record> = LazyLock::new(Record::default);

impl Clone for Record {
    fn clone(&self) -> Self {
        Record {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| (k.clone(), v.clone_as_boxed()))
                .collect(),
            lenient: self.lenient,
        }
    }
}

impl Val for Record {
    fn get_type(&self) -> &Type {
        <Self as Val>::cel_type()
    }
    fn cel_type() -> &'static Type {
        &cel::common::types::MAP_TYPE
    }
    fn as_indexer<'b, 'v>(&'b self) -> Option<&'b (dyn Indexer + 'v)>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn into_indexer<'v>(self: Box<Self>) -> Option<Box<dyn Indexer + 'v>>
    where
        Self: 'v,
    {
        Some(self)
    }
    fn as_sizer(&self) -> Option<&dyn cel::common::traits::Sizer> {
        Some(self)
    }
    fn as_container(&self) -> Option<&dyn cel::common::traits::Container> {
        Some(self)
    }
    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Record>().is_some_and(|o| {
            self.entries.len() == o.entries.len()
                && self
                    .entries
                    .iter()
                    .all(|(k, v)| o.entries.get(k).is_some_and(|ov| v.equals(ov.as_ref())))
        })
    }
    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }
    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}
impl StaticVal for Record {}

impl cel::common::traits::Sizer for Record {
    fn size(&self) -> CelInt {
        CelInt::from(self.entries.len() as i64)
    }
}

impl cel::common::traits::Container for Record {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        match value.downcast_ref::<CelString>() {
            Some(s) => Ok(self.entries.contains_key(s.inner())),
            None => Ok(false),
        }
    }
}

impl Indexer for Record {
    fn get<'b, 'v>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'v>, ExecutionError>
    where
        Self: 'v,
    {
        let Some(key) = idx.downcast_ref::<CelString>() else {
            return Err(ExecutionError::UnexpectedType {
                got: idx.get_type().name().to_owned(),
                want: "string".to_owned(),
            });
        };
        match self.entries.get(key.inner()) {
            Some(v) => Ok(CowVal::Borrowed(v.as_ref())),
            None if self.lenient => Ok(CowVal::Borrowed(&*EMPTY)),
            None => Err(ExecutionError::no_such_key(key.inner())),
        }
    }
    fn steal<'v>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'v>, ExecutionError>
    where
        Self: 'v,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

fn cel_err(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

// The quantity library.
fn quantity(s: &CelString<'_>) -> Result<CelQuantity, ExecutionError> {
    Quantity::parse(s.inner())
        .map(CelQuantity)
        .map_err(|e| cel_err("quantity", e))
}
fn is_quantity(s: &CelString<'_>) -> CelBool {
    CelBool::from(Quantity::parse(s.inner()).is_ok())
}
fn q_sign(q: &CelQuantity) -> CelInt {
    CelInt::from(match q.0.cmp_value(&Quantity::from_units(0)) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}
fn q_is_greater_than(a: &CelQuantity, b: &CelQuantity) -> CelBool {
    CelBool::from(a.0.cmp_value(&b.0) == Ordering::Greater)
}
fn q_is_less_than(a: &CelQuantity, b: &CelQuantity) -> CelBool {
    CelBool::from(a.0.cmp_value(&b.0) == Ordering::Less)
}
fn q_compare_to(a: &CelQuantity, b: &CelQuantity) -> CelInt {
    CelInt::from(a.0.cmp_value(&b.0) as i64)
}
fn q_is_integer(q: &CelQuantity) -> CelBool {
    CelBool::from(q.0.milli_value() % 1000 == 0)
}
fn q_as_integer(q: &CelQuantity) -> Result<CelInt, ExecutionError> {
    if q.0.milli_value() % 1000 != 0 {
        return Err(cel_err("asInteger", "cannot convert value to integer"));
    }
    Ok(CelInt::from(q.0.value()))
}
fn q_as_approximate_float(q: &CelQuantity) -> CelDouble {
    CelDouble::from(q.0.milli_value() as f64 / 1000.0)
}
fn q_add(a: &CelQuantity, b: &CelQuantity) -> CelQuantity {
    CelQuantity(a.0.checked_add(&b.0))
}
fn q_add_int(a: &CelQuantity, b: &CelInt) -> CelQuantity {
    CelQuantity(a.0.checked_add(&Quantity::from_units(*b.inner())))
}
fn q_sub(a: &CelQuantity, b: &CelQuantity) -> CelQuantity {
    CelQuantity(a.0.checked_add(&Quantity::from_milli(b.0.milli_value().saturating_neg())))
}
fn q_sub_int(a: &CelQuantity, b: &CelInt) -> CelQuantity {
    CelQuantity(a.0.checked_add(&Quantity::from_units(b.inner().saturating_neg())))
}

// The semver library.
fn semver(s: &CelString<'_>) -> Result<CelSemver, ExecutionError> {
    Version::parse(s.inner())
        .map(CelSemver)
        .map_err(|e| cel_err("semver", e))
}
fn is_semver(s: &CelString<'_>) -> CelBool {
    CelBool::from(Version::parse(s.inner()).is_ok())
}
fn v_is_greater_than(a: &CelSemver, b: &CelSemver) -> CelBool {
    CelBool::from(a.0 > b.0)
}
fn v_is_less_than(a: &CelSemver, b: &CelSemver) -> CelBool {
    CelBool::from(a.0 < b.0)
}
fn v_compare_to(a: &CelSemver, b: &CelSemver) -> CelInt {
    CelInt::from(a.0.cmp(&b.0) as i64)
}
fn v_major(a: &CelSemver) -> CelInt {
    CelInt::from(a.0.major as i64)
}
fn v_minor(a: &CelSemver) -> CelInt {
    CelInt::from(a.0.minor as i64)
}
fn v_patch(a: &CelSemver) -> CelInt {
    CelInt::from(a.0.patch as i64)
}

fn kubernetes_libraries(env: &mut Env) -> Result<(), cel::DeclarationError> {
    cel::add_overload!(env, fn quantity: (CelString) -> Result<CelQuantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool, name = "isQuantity")?;
    cel::add_member_overload!(env, fn q_sign: (CelQuantity) -> CelInt, name = "sign")?;
    cel::add_member_overload!(env, fn q_is_greater_than: (CelQuantity, CelQuantity) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn q_is_less_than: (CelQuantity, CelQuantity) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn q_compare_to: (CelQuantity, CelQuantity) -> CelInt, name = "compareTo")?;
    cel::add_member_overload!(env, fn q_is_integer: (CelQuantity) -> CelBool, name = "isInteger")?;
    cel::add_member_overload!(env, fn q_as_integer: (CelQuantity) -> Result<CelInt>, name = "asInteger")?;
    cel::add_member_overload!(env, fn q_as_approximate_float: (CelQuantity) -> CelDouble, name = "asApproximateFloat")?;
    cel::add_member_overload!(env, fn q_add: (CelQuantity, CelQuantity) -> CelQuantity, name = "add")?;
    cel::add_member_overload!(env, fn q_add_int: (CelQuantity, CelInt) -> CelQuantity, name = "add")?;
    cel::add_member_overload!(env, fn q_sub: (CelQuantity, CelQuantity) -> CelQuantity, name = "sub")?;
    cel::add_member_overload!(env, fn q_sub_int: (CelQuantity, CelInt) -> CelQuantity, name = "sub")?;
    cel::add_overload!(env, fn semver: (CelString) -> Result<CelSemver>)?;
    cel::add_overload!(env, fn is_semver: (CelString) -> CelBool, name = "isSemver")?;
    cel::add_member_overload!(env, fn v_is_greater_than: (CelSemver, CelSemver) -> CelBool, name = "isGreaterThan")?;
    cel::add_member_overload!(env, fn v_is_less_than: (CelSemver, CelSemver) -> CelBool, name = "isLessThan")?;
    cel::add_member_overload!(env, fn v_compare_to: (CelSemver, CelSemver) -> CelInt, name = "compareTo")?;
    cel::add_member_overload!(env, fn v_major: (CelSemver) -> CelInt, name = "major")?;
    cel::add_member_overload!(env, fn v_minor: (CelSemver) -> CelInt, name = "minor")?;
    cel::add_member_overload!(env, fn v_patch: (CelSemver) -> CelInt, name = "patch")?;
    Ok(())
}

/// `cel.bind(name, init, expr)` (cel-go's bindings extension): `expr` with
/// `name` bound to `init`, as a comprehension over nothing whose
/// accumulator is the binding.
fn bind_macro() -> cel::parser::Macro {
    use cel::common::ast::{ComprehensionExpr, Expr, ListExpr, LiteralValue};
    cel::parser::Macro::receiver("bind", 3, |helper, target, args| {
        if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel") {
            return Ok(None);
        }
        let result = args.remove(2);
        let init = args.remove(1);
        let var = args.remove(0);
        let Expr::Ident(name) = var.expr else {
            return Err(helper.new_error(
                var.id,
                "cel.bind() variable names must be simple identifiers",
            ));
        };
        let range = helper.next_expr(Expr::List(ListExpr {
            elements: Vec::new(),
            optional_indices: Vec::new(),
        }));
        let cond = helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into())));
        let step = helper.next_expr(Expr::Ident(name.clone()));
        Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(
            ComprehensionExpr {
                iter_range: range,
                iter_var: "#unused".to_string(),
                iter_var2: None,
                accu_var: name,
                accu_init: init,
                loop_cond: cond,
                loop_step: step,
                result,
            },
        )))))
    })
}

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_macro(bind_macro())
        .expect("cel.bind is the only macro named bind");
    env.add_extension(cel::extensions::strings)
        .and_then(|()| env.add_extension(cel::extensions::lists))
        .and_then(|()| env.add_extension(kubernetes_libraries))
        .expect("the selector environment's libraries declare distinct overloads");
    Arc::new(env)
});

/// A compiled selector.
#[derive(Debug)]
pub struct Selector {
    program: Program,
    /// Its cost bound passes upstream's limit ([`crate::cel_cost`]).
    over_budget: bool,
}

/// What a selector is evaluated against.
pub struct DeviceView<'a> {
    /// The driver.
    pub driver: &'a str,
    /// Attributes by fully qualified name.
    pub attributes: &'a BTreeMap<String, AttrValue>,
    /// Capacities by fully qualified name.
    pub capacity: &'a BTreeMap<String, rkube_model::dra::Capacity>,
    /// `allowMultipleAllocations`.
    pub allow_multiple_allocations: bool,
}

fn split(name: &str) -> (&str, &str) {
    name.rsplit_once('/').unwrap_or(("", name))
}

fn device_value(d: &DeviceView<'_>) -> Result<Record, String> {
    let mut attributes: BTreeMap<String, Record> = BTreeMap::new();
    for (name, v) in d.attributes {
        let (domain, id) = split(name);
        let val: Box<dyn Val> = match v {
            AttrValue::Int(i) => Box::new(CelInt::from(*i)),
            AttrValue::Bool(b) => Box::new(CelBool::from(*b)),
            AttrValue::String(s) => Box::new(CelString::from(s.clone())),
            AttrValue::Version(s) => Box::new(CelSemver(
                Version::parse(s).map_err(|e| format!("attribute {name}: {e}"))?,
            )),
        };
        attributes
            .entry(domain.to_string())
            .or_default()
            .entries
            .insert(id.to_string(), val);
    }
    let mut capacity: BTreeMap<String, Record> = BTreeMap::new();
    for (name, c) in d.capacity {
        let (domain, id) = split(name);
        capacity
            .entry(domain.to_string())
            .or_default()
            .entries
            .insert(id.to_string(), Box::new(CelQuantity(c.value)));
    }
    let outer = |m: BTreeMap<String, Record>| Record {
        entries: m
            .into_iter()
            .map(|(k, v)| (k, Box::new(v) as Box<dyn Val>))
            .collect(),
        lenient: true,
    };
    let mut device = Record::default();
    device.entries.insert(
        "driver".into(),
        Box::new(CelString::from(d.driver.to_string())),
    );
    device.entries.insert(
        "allowMultipleAllocations".into(),
        Box::new(CelBool::from(d.allow_multiple_allocations)),
    );
    device
        .entries
        .insert("attributes".into(), Box::new(outer(attributes)));
    device
        .entries
        .insert("capacity".into(), Box::new(outer(capacity)));
    Ok(device)
}

impl Selector {
    /// Compiles `source`.
    pub fn compile(source: &str) -> Result<Selector, String> {
        if source.len() > MAX_EXPRESSION_LENGTH {
            return Err(format!(
                "compilation failed: expression too long ({} bytes, at most {MAX_EXPRESSION_LENGTH})",
                source.len()
            ));
        }
        let ops = crate::cel_cost::operator_count(source);
        if ops > crate::cel_cost::MAX_OPERATORS {
            return Err(format!(
                "compilation failed: expression nests too deeply ({ops} operators; rkube allows at most {})",
                crate::cel_cost::MAX_OPERATORS
            ));
        }
        // cel-go's text without its source excerpt lines (one line).
        let program = ENV.compile(source).map_err(|e| {
            let text = e.to_string();
            let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("ERROR:")).collect();
            if errors.is_empty() {
                format!("compilation failed: {}", text.replace('\n', " "))
            } else {
                format!("compilation failed: {}", errors.join("; "))
            }
        })?;
        let over_budget = crate::cel_cost::cost(program.expression()) > crate::cel_cost::MAX_COST;
        Ok(Selector {
            program,
            over_budget,
        })
    }

    /// Whether the device matches: true or false, or the runtime error.
    pub fn matches(&self, device: &DeviceView<'_>) -> Result<bool, String> {
        if self.over_budget {
            return Err("operation cancelled: actual cost limit exceeded".into());
        }
        let mut ctx = Context::with_env(ENV.clone());
        ctx.add_variable_as_val("device", Box::new(device_value(device)?));
        match self.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!(
                "CEL result of type {} could not be converted to bool",
                other.type_of()
            )),
            // cel-go's text, with the hint upstream appends to it.
            Err(ExecutionError::NoSuchKey(k)) => Err(format!(
                "no such key: {k}. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
            )),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Compiled selectors by source, shared by every allocation.
#[derive(Default)]
pub struct Cache {
    compiled: Mutex<HashMap<String, Arc<Result<Selector, String>>>>,
}

impl Cache {
    /// The compiled `source` (compiled on first use).
    pub fn get(&self, source: &str) -> Arc<Result<Selector, String>> {
        let mut m = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = m.get(source) {
            return s.clone();
        }
        let s = Arc::new(Selector::compile(source));
        m.insert(source.to_string(), s.clone());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rkube_model::dra::Capacity;

    fn gpu() -> (BTreeMap<String, AttrValue>, BTreeMap<String, Capacity>) {
        let mut a = BTreeMap::new();
        a.insert(
            "gpu.example.com/model".into(),
            AttrValue::String("a100".into()),
        );
        a.insert("gpu.example.com/cores".into(), AttrValue::Int(108));
        a.insert("gpu.example.com/mig".into(), AttrValue::Bool(false));
        a.insert(
            "gpu.example.com/driverVersion".into(),
            AttrValue::Version("1.2.3-rc.1".into()),
        );
        a.insert("numa.example.org/node".into(), AttrValue::Int(1));
        let mut c = BTreeMap::new();
        c.insert(
            "gpu.example.com/memory".into(),
            Capacity {
                name: "memory".into(),
                value: Quantity::parse("40Gi").unwrap(),
                default: None,
                valid_values: vec![],
                valid_range: None,
            },
        );
        (a, c)
    }

    fn eval(expr: &str) -> Result<bool, String> {
        let (a, c) = gpu();
        let d = DeviceView {
            driver: "gpu.example.com",
            attributes: &a,
            capacity: &c,
            allow_multiple_allocations: false,
        };
        Selector::compile(expr)?.matches(&d)
    }

    #[test]
    fn selectors_see_the_device() {
        for (expr, want) in [
            (r#"device.driver == "gpu.example.com""#, true),
            (
                r#"device.attributes["gpu.example.com"].model == "a100""#,
                true,
            ),
            (r#"device.attributes["gpu.example.com"].cores >= 100"#, true),
            (r#"device.attributes["gpu.example.com"].mig"#, false),
            (r#"device.attributes["numa.example.org"].node == 1"#, true),
            (
                r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("32Gi")) >= 0"#,
                true,
            ),
            (
                r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("64Gi"))"#,
                false,
            ),
            (
                r#"device.capacity["gpu.example.com"].memory == quantity("40960Mi")"#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.isLessThan(semver("1.2.3"))"#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.major() == 1"#,
                true,
            ),
            (
                r#"has(device.attributes["other.example.com"].model)"#,
                false,
            ),
            (r#"has(device.attributes["gpu.example.com"].model)"#, true),
            (r#""gpu.example.com" in device.attributes"#, true),
            (
                r#"device.attributes["gpu.example.com"].model.upperAscii() == "A100""#,
                true,
            ),
            (
                r#"cel.bind(g, device.attributes["gpu.example.com"], g.model == "a100" && g.cores > 1)"#,
                true,
            ),
            (r#"device.allowMultipleAllocations"#, false),
        ] {
            assert_eq!(eval(expr), Ok(want), "{expr}");
        }
    }

    #[test]
    fn runtime_errors_are_reported() {
        let e = eval(r#"device.attributes["gpu.example.com"].missing == 1"#).unwrap_err();
        assert!(e.starts_with("no such key: missing. consider using CEL optional chaining (.? followed by orValue())"), "{e}");
        let e = eval(r#"device.attributes["gpu.example.com"].cores"#).unwrap_err();
        assert!(e.contains("could not be converted to bool"), "{e}");
        assert!(Selector::compile("device.driver ==").is_err());
        assert!(Selector::compile(&"a".repeat(MAX_EXPRESSION_LENGTH + 1)).is_err());
    }

    #[test]
    fn the_cache_compiles_once() {
        let c = Cache::default();
        let a = c.get("device.driver == 'x'");
        let b = c.get("device.driver == 'x'");
        assert!(Arc::ptr_eq(&a, &b));
    }
}

#[cfg(test)]
mod deep_tests {
    use super::*;

    fn eval_on_small_stack(src: String) -> Result<bool, String> {
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let (a, cap) = (BTreeMap::new(), BTreeMap::new());
                let d = DeviceView {
                    driver: "d",
                    attributes: &a,
                    capacity: &cap,
                    allow_multiple_allocations: false,
                };
                Selector::compile(&src)?.matches(&d)
            })
            .unwrap()
            .join()
            .unwrap()
    }

    #[test]
    fn deep_expressions_are_refused_not_a_stack_overflow() {
        // 2,400 chained additions overflowed a 2 MiB stack before the guard.
        let e = eval_on_small_stack(format!("{}1 == 1", "1 + ".repeat(2400))).unwrap_err();
        assert!(e.contains("nests too deeply"), "{e}");
        let e = eval_on_small_stack(format!("{}true", "!".repeat(9000))).unwrap_err();
        assert!(e.contains("nests too deeply"), "{e}");
        // Just under the limit still works on a worker thread's stack.
        assert_eq!(
            eval_on_small_stack(format!("{}1 == 1", "1 + ".repeat(240))),
            Ok(false)
        );
        assert_eq!(
            eval_on_small_stack(format!("{}true", "true && ".repeat(240))),
            Ok(true)
        );
    }

    #[test]
    fn costly_selectors_fail_as_upstreams_do() {
        let big: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        let l = format!("[{}]", big.join(","));
        let e =
            eval_on_small_stack(format!("{l}.all(x, {l}.all(y, x != y || x == y))")).unwrap_err();
        assert_eq!(e, "operation cancelled: actual cost limit exceeded");
        let e = eval_on_small_stack("lists.range(4000000000).size() > 0".into()).unwrap_err();
        assert_eq!(e, "operation cancelled: actual cost limit exceeded");
    }
}
