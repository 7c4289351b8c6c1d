//! The evaluator: walks the tree with Go's semantics for dot, variables, pipelines,
//! control structures and function calls, within step, allocation and output budgets.

use zeroize::Zeroizing;

use super::ctx::Ctx;
use super::format;
use super::funcs::{FuncDef, Kind};
use super::parse::{Arg, Cmd, Const, Node, Pipe, Tree};
use super::value::Value;
use super::{Fail, MAX_DEPTH, MAX_OUTPUT};

#[derive(PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

pub(crate) struct Exec<'a> {
    ctx: Ctx,
    vars: Vec<(&'a str, Value)>,
    out: Zeroizing<Vec<u8>>,
    tree: &'a Tree,
    /// The template's own name, which `{{template}}` may call too.
    name: &'a str,
    /// Nesting of lists, pipelines and template calls being evaluated.
    depth: usize,
}

/// Deepest evaluation nesting. Parsing already limits one template to [`MAX_DEPTH`]
/// levels; this bounds recursion through `{{template}}` calls.
const MAX_EXEC_DEPTH: usize = 3 * MAX_DEPTH;

/// Runs a parsed template with the map `items` as dot and `$`.
pub(crate) fn execute<'i>(
    tree: &Tree,
    name: &str,
    items: impl IntoIterator<Item = (&'i str, &'i [u8])>,
) -> Result<Zeroizing<Vec<u8>>, Fail> {
    let mut ctx = Ctx::new();
    let entries = items
        .into_iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), Value::str(v.to_vec())))
        .collect();
    let data = ctx.new_map(entries, true);
    let mut exec = Exec {
        ctx,
        vars: vec![("$", data.clone())],
        out: Zeroizing::new(Vec::new()),
        tree,
        name,
        depth: 0,
    };
    exec.walk(&data, &tree.root)?;
    Ok(std::mem::take(&mut exec.out))
}

impl<'a> Exec<'a> {
    fn fail(pos: usize, msg: impl Into<String>) -> Fail {
        Fail::at(pos, msg)
    }

    fn write(&mut self, bytes: &[u8], pos: usize) -> Result<(), Fail> {
        if self.out.len().saturating_add(bytes.len()) > MAX_OUTPUT {
            return Err(Self::fail(
                pos,
                format!("output larger than {} MiB", MAX_OUTPUT >> 20),
            ));
        }
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    fn step(&mut self, pos: usize) -> Result<(), Fail> {
        self.ctx.step().map_err(|m| Self::fail(pos, m))
    }

    fn enter(&mut self, pos: usize) -> Result<(), Fail> {
        self.depth += 1;
        if self.depth > MAX_EXEC_DEPTH {
            return Err(Self::fail(
                pos,
                format!("template calls nested deeper than {MAX_EXEC_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    fn walk(&mut self, dot: &Value, nodes: &'a [Node]) -> Result<Flow, Fail> {
        self.enter(0)?;
        let flow = self.walk_nodes(dot, nodes);
        self.depth -= 1;
        flow
    }

    fn walk_nodes(&mut self, dot: &Value, nodes: &'a [Node]) -> Result<Flow, Fail> {
        for node in nodes {
            match node {
                Node::Text(pos, t) => {
                    self.step(*pos)?;
                    self.write(t, *pos)?;
                }
                Node::Action(pipe) => {
                    self.step(pipe.pos)?;
                    let v = self.pipeline(dot, pipe)?;
                    if pipe.decl.is_empty() {
                        self.print(&v, pipe.pos)?;
                    }
                }
                Node::If {
                    with,
                    pipe,
                    list,
                    else_list,
                } => {
                    self.step(pipe.pos)?;
                    let mark = self.vars.len();
                    let flow = self.pipeline(dot, pipe).and_then(|v| {
                        if v.truth() {
                            let body_dot = if *with { v } else { dot.clone() };
                            self.walk(&body_dot, list)
                        } else {
                            self.walk(dot, else_list)
                        }
                    });
                    self.vars.truncate(mark);
                    let flow = flow?;
                    if flow != Flow::Normal {
                        return Ok(flow);
                    }
                }
                Node::Range {
                    pipe,
                    list,
                    else_list,
                } => {
                    self.step(pipe.pos)?;
                    let mark = self.vars.len();
                    let result = self.range(dot, pipe, list, else_list);
                    self.vars.truncate(mark);
                    result?;
                }
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
                Node::Template { pos, name, pipe } => {
                    self.step(*pos)?;
                    let value = match pipe {
                        Some(p) => self.pipeline(dot, p)?,
                        None => Value::Nil,
                    };
                    let tree = self.tree;
                    let body = match tree.defs.get(name) {
                        Some(body) => body.as_slice(),
                        None if name == self.name => tree.root.as_slice(),
                        None => {
                            return Err(Self::fail(*pos, format!("no such template \"{name}\"")));
                        }
                    };
                    self.enter(*pos)?;
                    // A called template sees only `$`, bound to its dot.
                    let vars = std::mem::replace(&mut self.vars, vec![("$", value.clone())]);
                    let flow = self.walk(&value, body);
                    self.vars = vars;
                    self.depth -= 1;
                    flow?;
                }
            }
        }
        Ok(Flow::Normal)
    }

    fn range(
        &mut self,
        dot: &Value,
        pipe: &'a Pipe,
        list: &'a [Node],
        else_list: &'a [Node],
    ) -> Result<(), Fail> {
        let value = self.commands(dot, pipe)?;
        // (key or index, element) pairs, computed up front (Go snapshots map keys too).
        let items: Vec<(Value, Value)> = match &value {
            Value::List(l) => l
                .iter()
                .enumerate()
                .map(|(i, v)| (Value::Int(i64::try_from(i).unwrap_or(i64::MAX)), v.clone()))
                .collect(),
            Value::Map(m) => m
                .snapshot()
                .into_iter()
                .map(|(k, v)| (Value::str(k), v))
                .collect(),
            Value::Int(n) => {
                if pipe.decl.len() > 1 {
                    return Err(Self::fail(
                        pipe.pos,
                        "can't use an int to iterate over more than one variable",
                    ));
                }
                if *n > i64::try_from(super::MAX_STEPS).unwrap_or(i64::MAX) {
                    return Err(Self::fail(
                        pipe.pos,
                        format!("template execution exceeded {} steps", super::MAX_STEPS),
                    ));
                }
                (0..(*n).max(0))
                    .map(|i| (Value::Int(i), Value::Int(i)))
                    .collect()
            }
            Value::Nil => Vec::new(),
            other => {
                return Err(Self::fail(
                    pipe.pos,
                    format!(
                        "range can't iterate over a value of type {}",
                        other.type_name()
                    ),
                ));
            }
        };
        if items.is_empty() {
            self.walk(dot, else_list)?;
            return Ok(());
        }
        for (key, elem) in items {
            self.step(pipe.pos)?;
            let mark = self.vars.len();
            match pipe.decl.as_slice() {
                [] => {}
                [v] => self.bind(v, elem.clone(), pipe.assign, pipe.pos)?,
                [k, v, ..] => {
                    self.bind(k, key, pipe.assign, pipe.pos)?;
                    self.bind(v, elem.clone(), pipe.assign, pipe.pos)?;
                }
            }
            let flow = self.walk(&elem, list);
            self.vars.truncate(mark);
            if flow? == Flow::Break {
                break;
            }
        }
        Ok(())
    }

    fn bind(&mut self, name: &'a str, value: Value, assign: bool, pos: usize) -> Result<(), Fail> {
        if assign {
            let slot = self.slot(name, pos)?;
            self.vars[slot].1 = value;
        } else {
            self.vars.push((name, value));
        }
        Ok(())
    }

    /// Evaluates a pipeline's commands and binds its declaration.
    fn pipeline(&mut self, dot: &Value, pipe: &'a Pipe) -> Result<Value, Fail> {
        self.enter(pipe.pos)?;
        let value = self.commands(dot, pipe);
        self.depth -= 1;
        let value = value?;
        for name in &pipe.decl {
            self.bind(name, value.clone(), pipe.assign, pipe.pos)?;
        }
        Ok(value)
    }

    fn commands(&mut self, dot: &Value, pipe: &'a Pipe) -> Result<Value, Fail> {
        let mut value = None;
        for cmd in &pipe.cmds {
            value = Some(self.command(dot, cmd, value)?);
        }
        Ok(value.unwrap_or(Value::Nil))
    }

    /// Where the innermost variable `name` sits. The scan is paid for from the step
    /// budget, so a template with very many variables cannot make lookups quadratic.
    fn slot(&mut self, name: &str, pos: usize) -> Result<usize, Fail> {
        let found = self.vars.iter().rposition(|(n, _)| *n == name);
        let distance = found.map_or(self.vars.len(), |i| self.vars.len() - i);
        self.ctx
            .step_n(u64::try_from(distance / 16).unwrap_or(u64::MAX))
            .map_err(|m| Self::fail(pos, m))?;
        found.ok_or_else(|| Self::fail(pos, format!("undefined variable \"{name}\"")))
    }

    fn var(&mut self, name: &str, pos: usize) -> Result<Value, Fail> {
        let slot = self.slot(name, pos)?;
        Ok(self.vars[slot].1.clone())
    }

    fn command(&mut self, dot: &Value, cmd: &'a Cmd, last: Option<Value>) -> Result<Value, Fail> {
        let Some((first, rest)) = cmd.args.split_first() else {
            return Err(Self::fail(cmd.pos, "empty command"));
        };
        let has_args = !rest.is_empty() || last.is_some();
        let not_a_function = |what: &str| -> Result<(), Fail> {
            if has_args {
                Err(Self::fail(
                    cmd.pos,
                    format!("can't give argument to non-function {what}"),
                ))
            } else {
                Ok(())
            }
        };
        match first {
            Arg::Func(def, pos) => self.call(dot, def, *pos, rest, last),
            Arg::Field(names) => self.fields(dot.clone(), names, has_args, cmd.pos),
            Arg::Var(name, names) => {
                let v = self.var(name, cmd.pos)?;
                if names.is_empty() {
                    not_a_function(name)?;
                    return Ok(v);
                }
                self.fields(v, names, has_args, cmd.pos)
            }
            Arg::Chain(node, names) => {
                let v = self.arg(dot, node, cmd.pos)?;
                self.fields(v, names, has_args, cmd.pos)
            }
            Arg::Pipe(p) => {
                not_a_function("a parenthesized pipeline")?;
                self.pipeline(dot, p)
            }
            Arg::Dot => {
                not_a_function(".")?;
                Ok(dot.clone())
            }
            Arg::Nil => Err(Self::fail(cmd.pos, "nil is not a command")),
            Arg::Const(c) => {
                not_a_function("a constant")?;
                Ok(c.value())
            }
        }
    }

    /// `.a.b` on `receiver`; fields are map keys (a missing key gives nil, as Go does).
    fn fields(
        &mut self,
        mut receiver: Value,
        names: &[String],
        has_args: bool,
        pos: usize,
    ) -> Result<Value, Fail> {
        for (i, name) in names.iter().enumerate() {
            receiver = match &receiver {
                Value::Map(m) => {
                    if has_args && i + 1 == names.len() {
                        return Err(Self::fail(
                            pos,
                            format!("{name} is not a method but has arguments"),
                        ));
                    }
                    m.get(name.as_bytes()).unwrap_or(Value::Nil)
                }
                Value::Nil => Value::Nil,
                other => {
                    return Err(Self::fail(
                        pos,
                        format!("can't evaluate field {name} in type {}", other.type_name()),
                    ));
                }
            };
        }
        Ok(receiver)
    }

    /// Evaluates one argument. A function name as an argument is called with no
    /// arguments, as in Go.
    fn arg(&mut self, dot: &Value, arg: &'a Arg, pos: usize) -> Result<Value, Fail> {
        match arg {
            Arg::Dot => Ok(dot.clone()),
            Arg::Nil => Ok(Value::Nil),
            Arg::Const(c) => Ok(c.value()),
            Arg::Field(names) => self.fields(dot.clone(), names, false, pos),
            Arg::Var(name, names) => {
                let v = self.var(name, pos)?;
                self.fields(v, names, false, pos)
            }
            Arg::Chain(node, names) => {
                let v = self.arg(dot, node, pos)?;
                self.fields(v, names, false, pos)
            }
            Arg::Pipe(p) => self.pipeline(dot, p),
            Arg::Func(def, fpos) => self.call(dot, def, *fpos, &[], None),
        }
    }

    fn call(
        &mut self,
        dot: &Value,
        def: &'static FuncDef,
        pos: usize,
        args: &'a [Arg],
        last: Option<Value>,
    ) -> Result<Value, Fail> {
        self.step(pos)?;
        let argc = args.len() + usize::from(last.is_some());
        if argc < def.min || def.max.is_some_and(|max| argc > max) {
            let want = match def.max {
                Some(max) if max == def.min => format!("{max}"),
                _ => format!("at least {}", def.min),
            };
            return Err(Self::fail(
                pos,
                format!(
                    "wrong number of args for {}: want {want} got {argc}",
                    def.name
                ),
            ));
        }
        match &def.kind {
            Kind::And | Kind::Or => {
                let want = matches!(def.kind, Kind::Or);
                let mut value = Value::Nil;
                for a in args {
                    value = self.arg(dot, a, pos)?;
                    if value.truth() == want {
                        return Ok(value);
                    }
                }
                Ok(last.unwrap_or(value))
            }
            Kind::Fail => {
                let literal = match (args.first(), &last) {
                    (Some(Arg::Const(Const::Str(s))), None) => Some(s.clone()),
                    _ => None,
                };
                // Evaluate anyway, so argument errors surface as in Go.
                let v = match args.first() {
                    Some(a) => self.arg(dot, a, pos)?,
                    None => last.unwrap_or(Value::Nil),
                };
                if !matches!(v, Value::Str(_)) {
                    return Err(Self::fail(
                        pos,
                        format!(
                            "error calling fail: argument 1: wrong type for value; expected string; got {}",
                            v.type_name()
                        ),
                    ));
                }
                Err(Self::fail(
                    pos,
                    match literal {
                        Some(msg) => format!(
                            "error calling fail: {}",
                            String::from_utf8_lossy(&msg)
                        ),
                        None => "error calling fail: (message not shown: it is computed from the template's data)".to_owned(),
                    },
                ))
            }
            Kind::Native(native) => {
                let mut values = Vec::with_capacity(argc);
                for a in args {
                    values.push(self.arg(dot, a, pos)?);
                }
                values.extend(last);
                let cost = values.iter().fold(1u64, |c, v| c.saturating_add(v.cost()));
                self.ctx
                    .step_n(cost)
                    .map_err(|m| Self::fail(pos, format!("error calling {}: {m}", def.name)))?;
                let result = native(&mut self.ctx, &values)
                    .map_err(|m| Self::fail(pos, format!("error calling {}: {m}", def.name)))?;
                self.ctx
                    .charge(&result)
                    .map_err(|m| Self::fail(pos, format!("error calling {}: {m}", def.name)))?;
                Ok(result)
            }
        }
    }

    /// Prints an action's value: strings as they are, nil as `<no value>`, else `%v`.
    fn print(&mut self, v: &Value, pos: usize) -> Result<(), Fail> {
        match v {
            Value::Str(s) => self.write(s.as_bytes(), pos),
            Value::Nil => self.write(b"<no value>", pos),
            other => {
                let mut buf = Zeroizing::new(Vec::new());
                format::write_v(&mut buf, other, 0).map_err(|m| Self::fail(pos, m))?;
                self.write(&buf, pos)
            }
        }
    }
}
