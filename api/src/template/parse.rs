//! The parser: tokens to a tree, with Go's checks (defined variables and functions,
//! `{{break}}` only inside `{{range}}`, executable pipeline stages) and a nesting limit.

use std::collections::{BTreeMap, HashMap};

use super::funcs::{self, FuncDef};
use super::lex::{Kw, Tok, Token};
use super::number::{parse_float, parse_int};
use super::value::Value;
use super::{Fail, MAX_DEPTH};

pub(crate) enum Node {
    /// Literal text and where it starts.
    Text(usize, Vec<u8>),
    Action(Pipe),
    /// `if` (or `with`, which also moves dot).
    If {
        with: bool,
        pipe: Pipe,
        list: Vec<Node>,
        else_list: Vec<Node>,
    },
    Range {
        pipe: Pipe,
        list: Vec<Node>,
        else_list: Vec<Node>,
    },
    Break,
    Continue,
    /// `{{template "name" pipeline}}` (also what `{{block}}` leaves in place).
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
}

/// A parsed template: its own nodes plus the templates it defines.
pub(crate) struct Tree {
    pub(crate) root: Vec<Node>,
    pub(crate) defs: BTreeMap<String, Vec<Node>>,
}

pub(crate) struct Pipe {
    pub(crate) pos: usize,
    pub(crate) decl: Vec<String>,
    /// `=` rather than `:=`.
    pub(crate) assign: bool,
    pub(crate) cmds: Vec<Cmd>,
}

pub(crate) struct Cmd {
    pub(crate) pos: usize,
    pub(crate) args: Vec<Arg>,
}

/// A literal. Kept apart from [`Value`] (which shares its strings through `Rc`) so that a
/// parsed template is `Send` and `Sync`.
pub(crate) enum Const {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Vec<u8>),
}

impl Const {
    pub(crate) fn value(&self) -> Value {
        match self {
            Const::Bool(b) => Value::Bool(*b),
            Const::Int(i) => Value::Int(*i),
            Const::Float(f) => Value::Float(*f),
            Const::Str(s) => Value::str(s.clone()),
        }
    }
}

pub(crate) enum Arg {
    Dot,
    Nil,
    /// A literal: string, number, character or bool.
    Const(Const),
    /// `.a.b`
    Field(Vec<String>),
    /// `$x.a.b`
    Var(String, Vec<String>),
    Func(&'static FuncDef, usize),
    Pipe(Box<Pipe>),
    /// `(pipeline).a.b`
    Chain(Box<Arg>, Vec<String>),
}

/// The variables in scope: a stack (truncated when a control structure ends) plus a
/// count per name, so that lookups stay O(1) however many variables a template declares.
struct Vars {
    stack: Vec<String>,
    counts: HashMap<String, usize>,
}

impl Vars {
    fn new() -> Self {
        let mut vars = Vars {
            stack: Vec::new(),
            counts: HashMap::new(),
        };
        vars.push("$");
        vars
    }

    fn push(&mut self, name: &str) {
        self.stack.push(name.to_owned());
        *self.counts.entry(name.to_owned()).or_insert(0) += 1;
    }

    fn len(&self) -> usize {
        self.stack.len()
    }

    fn truncate(&mut self, len: usize) {
        while self.stack.len() > len {
            if let Some(name) = self.stack.pop()
                && let Some(n) = self.counts.get_mut(&name)
            {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&name);
                }
            }
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.counts.contains_key(name)
    }
}

struct Parser<'t> {
    toks: &'t [Token],
    i: usize,
    end_pos: usize,
    vars: Vars,
    depth: usize,
    range_depth: usize,
    defs: BTreeMap<String, Vec<Node>>,
}

/// A list of nodes and what ended it (`None`: the end of input).
type Listed = (Vec<Node>, Option<(usize, Term)>);

enum Term {
    End,
    Else(Option<Kw>),
}

/// Parses a lexed template.
/// Whether a body is empty for Go's redefinition rule: blank text only.
fn blank(nodes: &[Node]) -> bool {
    nodes.iter().all(|n| match n {
        Node::Text(_, t) => t.iter().all(u8::is_ascii_whitespace),
        _ => false,
    })
}

/// Parses the template named `name`. Its own body is one more definition of `name`, added
/// after the `define`s as Go adds it: a `define` of the same name is an error unless one
/// of the two bodies is blank, and the non-blank one is what runs.
pub(crate) fn parse_named(toks: &[Token], src_len: usize, name: &str) -> Result<Tree, Fail> {
    let mut tree = parse(toks, src_len)?;
    if let Some(defined) = tree.defs.remove(name) {
        match (blank(&tree.root), blank(&defined)) {
            (false, false) => {
                return Err(Fail::at(
                    src_len,
                    format!("template: multiple definition of template \"{name}\""),
                ));
            }
            (true, false) => tree.root = defined,
            // The define is blank: the template's own body stands.
            (_, true) => {}
        }
    }
    Ok(tree)
}

pub(crate) fn parse(toks: &[Token], src_len: usize) -> Result<Tree, Fail> {
    let mut p = Parser {
        toks,
        i: 0,
        end_pos: src_len,
        vars: Vars::new(),
        depth: 0,
        range_depth: 0,
        defs: BTreeMap::new(),
    };
    let (list, term) = p.list()?;
    match term {
        None => Ok(Tree {
            root: list,
            defs: p.defs,
        }),
        Some((pos, Term::End)) => Err(Fail::at(pos, "unexpected {{end}}")),
        Some((pos, Term::Else(..))) => Err(Fail::at(pos, "unexpected {{else}}")),
    }
}

impl<'t> Parser<'t> {
    fn peek(&self) -> Option<&'t Token> {
        self.toks.get(self.i)
    }

    fn next(&mut self) -> Option<&'t Token> {
        let t = self.toks.get(self.i);
        self.i += 1;
        t
    }

    fn pos(&self) -> usize {
        self.peek().map_or(self.end_pos, |t| t.pos)
    }

    fn expect_close(&mut self, context: &str) -> Result<(), Fail> {
        let pos = self.pos();
        match self.next().map(|t| &t.tok) {
            Some(Tok::Close) => Ok(()),
            Some(t) => Err(Fail::at(
                pos,
                format!("unexpected {} in {context}", t.describe()),
            )),
            None => Err(Fail::at(pos, "unexpected EOF")),
        }
    }

    fn enter(&mut self, pos: usize) -> Result<(), Fail> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(Fail::at(
                pos,
                format!("template nested deeper than {MAX_DEPTH} levels"),
            ));
        }
        Ok(())
    }

    /// Nodes up to `{{end}}`, `{{else}}` or the end of input.
    fn list(&mut self) -> Result<Listed, Fail> {
        let mut nodes = Vec::new();
        while let Some(t) = self.next() {
            let pos = t.pos;
            match &t.tok {
                Tok::Text(s) => nodes.push(Node::Text(pos, s.clone())),
                Tok::Open => match self.action(pos)? {
                    Ok(node) => nodes.push(node),
                    Err(term) => return Ok((nodes, Some((pos, term)))),
                },
                other => {
                    return Err(Fail::at(pos, format!("unexpected {}", other.describe())));
                }
            }
        }
        Ok((nodes, None))
    }

    /// One action after `{{`: a node, or the `{{end}}`/`{{else}}` that ends a list.
    fn action(&mut self, open: usize) -> Result<Result<Node, Term>, Fail> {
        let Some(t) = self.peek() else {
            return Err(Fail::at(open, "unclosed action"));
        };
        let pos = t.pos;
        match t.tok {
            Tok::Kw(Kw::If) => {
                self.i += 1;
                self.control(Kw::If, pos).map(Ok)
            }
            Tok::Kw(Kw::With) => {
                self.i += 1;
                self.control(Kw::With, pos).map(Ok)
            }
            Tok::Kw(Kw::Range) => {
                self.i += 1;
                self.control(Kw::Range, pos).map(Ok)
            }
            Tok::Kw(Kw::End) => {
                self.i += 1;
                self.expect_close("end")?;
                Ok(Err(Term::End))
            }
            Tok::Kw(Kw::Else) => {
                self.i += 1;
                match self.peek().map(|t| &t.tok) {
                    Some(Tok::Kw(k @ (Kw::If | Kw::With))) => {
                        let k = *k;
                        self.i += 1;
                        Ok(Err(Term::Else(Some(k))))
                    }
                    _ => {
                        self.expect_close("else")?;
                        Ok(Err(Term::Else(None)))
                    }
                }
            }
            Tok::Kw(k @ (Kw::Break | Kw::Continue)) => {
                self.i += 1;
                if self.range_depth == 0 {
                    return Err(Fail::at(
                        pos,
                        format!("{{{{{}}}}} outside {{{{range}}}}", k.name()),
                    ));
                }
                self.expect_close(k.name())?;
                Ok(Ok(if k == Kw::Break {
                    Node::Break
                } else {
                    Node::Continue
                }))
            }
            Tok::Kw(Kw::Define) => {
                self.i += 1;
                if self.depth > 0 {
                    return Err(Fail::at(pos, "{{define}} is only allowed at the top level"));
                }
                let name = self.template_name("define")?;
                self.expect_close("define")?;
                let body = self.definition(pos)?;
                self.add_definition(name, body, pos)?;
                // A definition leaves nothing in place.
                Ok(Ok(Node::Text(pos, Vec::new())))
            }
            Tok::Kw(Kw::Template) => {
                self.i += 1;
                let name = self.template_name("template")?;
                let pipe = if matches!(self.peek().map(|t| &t.tok), Some(Tok::Close)) {
                    self.i += 1;
                    None
                } else {
                    Some(self.pipeline("template", false)?)
                };
                Ok(Ok(Node::Template { pos, name, pipe }))
            }
            Tok::Kw(Kw::Block) => {
                self.i += 1;
                let name = self.template_name("block")?;
                let pipe = self.pipeline("block", false)?;
                let body = self.definition(pos)?;
                self.add_definition(name.clone(), body, pos)?;
                Ok(Ok(Node::Template {
                    pos,
                    name,
                    pipe: Some(pipe),
                }))
            }
            _ => {
                let pipe = self.pipeline("command", false)?;
                Ok(Ok(Node::Action(pipe)))
            }
        }
    }

    /// The quoted name after `define`, `template` or `block`.
    fn template_name(&mut self, context: &str) -> Result<String, Fail> {
        let pos = self.pos();
        match self.next().map(|t| &t.tok) {
            Some(Tok::Str(name)) => Ok(String::from_utf8_lossy(name).into_owned()),
            Some(t) => Err(Fail::at(
                pos,
                format!("unexpected {} in {context}", t.describe()),
            )),
            None => Err(Fail::at(pos, "unexpected EOF")),
        }
    }

    /// The body of a `define` or `block`, through its `{{end}}`: a template of its own,
    /// with only `$` in scope.
    fn definition(&mut self, pos: usize) -> Result<Vec<Node>, Fail> {
        self.enter(pos)?;
        let vars = std::mem::replace(&mut self.vars, Vars::new());
        let range_depth = std::mem::replace(&mut self.range_depth, 0);
        let listed = self.list();
        self.vars = vars;
        self.range_depth = range_depth;
        self.depth -= 1;
        match listed? {
            (body, Some((_, Term::End))) => Ok(body),
            (_, Some((p, Term::Else(..)))) => Err(Fail::at(p, "unexpected {{else}}")),
            (_, None) => Err(Fail::at(self.end_pos, "unexpected EOF")),
        }
    }

    /// Records a definition. As in Go, a name may be defined again only if one of the
    /// two bodies is empty (blank text only).
    fn add_definition(&mut self, name: String, body: Vec<Node>, pos: usize) -> Result<(), Fail> {
        match self.defs.get(&name) {
            Some(existing) if !blank(existing) => {
                if !blank(&body) {
                    return Err(Fail::at(
                        pos,
                        format!("template: multiple definition of template \"{name}\""),
                    ));
                }
            }
            _ => {
                self.defs.insert(name, body);
            }
        }
        Ok(())
    }

    /// `if`, `with` or `range` after its keyword, through the matching `{{end}}`.
    fn control(&mut self, kind: Kw, pos: usize) -> Result<Node, Fail> {
        self.enter(pos)?;
        let mark = self.vars.len();
        let pipe = self.pipeline(kind.name(), false)?;
        if kind == Kw::Range {
            self.range_depth += 1;
        }
        let body_mark = self.vars.len();
        let listed = self.list();
        if kind == Kw::Range {
            self.range_depth -= 1;
        }
        let (list, term) = listed?;
        self.vars.truncate(body_mark);
        let else_list = match term {
            None => return Err(Fail::at(self.end_pos, "unexpected EOF")),
            Some((_, Term::End)) => Vec::new(),
            Some((_, Term::Else(None))) => {
                let (list, term) = self.list()?;
                match term {
                    Some((_, Term::End)) => list,
                    Some((p, Term::Else(..))) => {
                        return Err(Fail::at(p, "expected {{end}}; found {{else}}"));
                    }
                    None => return Err(Fail::at(self.end_pos, "unexpected EOF")),
                }
            }
            Some((p, Term::Else(Some(chained)))) => {
                if chained != kind {
                    return Err(Fail::at(
                        p,
                        format!(
                            "{{{{else {}}}}} is not allowed in {{{{{}}}}}",
                            chained.name(),
                            kind.name()
                        ),
                    ));
                }
                // `{{else if x}}` is `{{else}}{{if x}}...{{end}}` sharing one `{{end}}`.
                vec![self.control(chained, p)?]
            }
        };
        self.vars.truncate(mark);
        self.depth -= 1;
        Ok(match kind {
            Kw::Range => Node::Range {
                pipe,
                list,
                else_list,
            },
            _ => Node::If {
                with: kind == Kw::With,
                pipe,
                list,
                else_list,
            },
        })
    }

    /// A pipeline up to `}}` (or `)` when `paren`), with an optional declaration.
    fn pipeline(&mut self, context: &str, paren: bool) -> Result<Pipe, Fail> {
        let pos = self.pos();
        let mut decl = Vec::new();
        let mut assign = false;
        if let Some(Tok::Var(first)) = self.peek().map(|t| &t.tok) {
            let after = self.toks.get(self.i + 1).map(|t| &t.tok);
            match after {
                Some(Tok::Declare | Tok::Assign) => {
                    decl.push(first.clone());
                    assign = matches!(after, Some(Tok::Assign));
                    self.i += 2;
                }
                Some(Tok::Comma) if context == "range" => {
                    let second = self.toks.get(self.i + 2).map(|t| &t.tok);
                    let op = self.toks.get(self.i + 3).map(|t| &t.tok);
                    match (second, op) {
                        (Some(Tok::Var(second)), Some(Tok::Declare | Tok::Assign)) => {
                            decl.push(first.clone());
                            decl.push(second.clone());
                            assign = matches!(op, Some(Tok::Assign));
                            self.i += 4;
                        }
                        _ => return Err(Fail::at(pos, "range can only initialize variables")),
                    }
                }
                Some(Tok::Comma) => {
                    return Err(Fail::at(pos, format!("too many declarations in {context}")));
                }
                _ => {}
            }
        }
        if assign {
            for v in &decl {
                if !self.vars.contains(v) {
                    return Err(Fail::at(pos, format!("undefined variable \"{v}\"")));
                }
            }
        }
        if let Some(Tok::Close | Tok::RParen) = self.peek().map(|t| &t.tok) {
            return Err(Fail::at(self.pos(), format!("missing value for {context}")));
        }
        let mut cmds = Vec::new();
        loop {
            let cmd = self.command(paren)?;
            cmds.push(cmd);
            let pos = self.pos();
            match self.next().map(|t| &t.tok) {
                Some(Tok::Pipe) => match self.peek().map(|t| &t.tok) {
                    // Go accepts a trailing `|` before the end of the pipeline.
                    Some(Tok::Close) if !paren => {
                        self.i += 1;
                        break;
                    }
                    Some(Tok::RParen) if paren => {
                        self.i += 1;
                        break;
                    }
                    _ => continue,
                },
                Some(Tok::Close) if !paren => break,
                Some(Tok::RParen) if paren => break,
                Some(Tok::Close) => return Err(Fail::at(pos, "unclosed left paren")),
                Some(t) => {
                    return Err(Fail::at(
                        pos,
                        format!("unexpected {} in {context}", t.describe()),
                    ));
                }
                None => return Err(Fail::at(pos, "unclosed action")),
            }
        }
        for (n, cmd) in cmds.iter().enumerate().skip(1) {
            if matches!(cmd.args.first(), Some(Arg::Const(_) | Arg::Dot | Arg::Nil)) {
                return Err(Fail::at(
                    cmd.pos,
                    format!("non executable command in pipeline stage {}", n + 1),
                ));
            }
        }
        if !assign {
            for v in &decl {
                self.vars.push(v);
            }
        }
        Ok(Pipe {
            pos,
            decl,
            assign,
            cmds,
        })
    }

    fn command(&mut self, paren: bool) -> Result<Cmd, Fail> {
        let pos = self.pos();
        let mut args = Vec::new();
        while let Some(arg) = self.operand()? {
            args.push(arg);
            match self.peek() {
                Some(t) if matches!(t.tok, Tok::Close | Tok::RParen | Tok::Pipe) => break,
                Some(t) if !t.spaced => {
                    return Err(Fail::at(
                        t.pos,
                        format!("unexpected {} in operand", t.tok.describe()),
                    ));
                }
                _ => {}
            }
        }
        if args.is_empty() {
            let what = match self.peek().map(|t| &t.tok) {
                Some(Tok::Close) if !paren => "missing value for command".to_owned(),
                Some(Tok::RParen | Tok::Close | Tok::Pipe) => "empty command".to_owned(),
                Some(t) => format!("unexpected {} in command", t.describe()),
                None => "unclosed action".to_owned(),
            };
            return Err(Fail::at(pos, what));
        }
        Ok(Cmd { pos, args })
    }

    fn operand(&mut self) -> Result<Option<Arg>, Fail> {
        let Some(term) = self.term()? else {
            return Ok(None);
        };
        let mut fields = Vec::new();
        while let Some(Token {
            tok: Tok::Field(f),
            spaced: false,
            ..
        }) = self.peek()
        {
            fields.push(f.clone());
            self.i += 1;
        }
        if fields.is_empty() {
            return Ok(Some(term));
        }
        let pos = self.pos();
        Ok(Some(match term {
            Arg::Field(mut names) => {
                names.extend(fields);
                Arg::Field(names)
            }
            Arg::Var(name, mut names) => {
                names.extend(fields);
                Arg::Var(name, names)
            }
            Arg::Pipe(_) => Arg::Chain(Box::new(term), fields),
            _ => {
                return Err(Fail::at(
                    pos,
                    "unexpected field after a term that has no fields",
                ));
            }
        }))
    }

    fn term(&mut self) -> Result<Option<Arg>, Fail> {
        let Some(t) = self.peek() else {
            return Ok(None);
        };
        let pos = t.pos;
        let arg = match &t.tok {
            Tok::Ident(name) => match funcs::lookup(name) {
                Some(def) => Arg::Func(def, pos),
                None => return Err(Fail::at(pos, funcs::undefined_message(name))),
            },
            Tok::Dot => Arg::Dot,
            Tok::Nil => Arg::Nil,
            Tok::Var(name) => {
                if !self.vars.contains(name) {
                    return Err(Fail::at(pos, format!("undefined variable \"{name}\"")));
                }
                Arg::Var(name.clone(), Vec::new())
            }
            Tok::Field(name) => Arg::Field(vec![name.clone()]),
            Tok::Bool(b) => Arg::Const(Const::Bool(*b)),
            Tok::Char(c) => Arg::Const(Const::Int(i64::from(u32::from(*c)))),
            Tok::Num(text) => Arg::Const(number(text).map_err(|m| Fail::at(pos, m))?),
            Tok::Str(s) => Arg::Const(Const::Str(s.clone())),
            Tok::LParen => {
                self.i += 1;
                self.enter(pos)?;
                let pipe = self.pipeline("parenthesized pipeline", true)?;
                self.depth -= 1;
                return Ok(Some(Arg::Pipe(Box::new(pipe))));
            }
            _ => return Ok(None),
        };
        self.i += 1;
        Ok(Some(arg))
    }
}

/// A number literal as Go's template parser types it: an integer unless written with a
/// `.`, an exponent or as a float too large for int64.
pub(crate) fn number(text: &str) -> Result<Const, String> {
    if text.ends_with('i') {
        return Err(format!("complex number {text} is not supported"));
    }
    let is_hex = {
        let t = text.trim_start_matches(['+', '-']);
        t.starts_with("0x") || t.starts_with("0X")
    };
    if (!is_hex || !text.contains(['p', 'P']))
        && let Some(i) = parse_int(text)
        && (is_hex || !text.contains(['.', 'e', 'E']))
    {
        return Ok(Const::Int(i));
    }
    if is_hex && text.contains(['p', 'P', '.']) {
        return Err(format!(
            "hexadecimal floating-point number {text} is not supported"
        ));
    }
    if let Some(f) = parse_float(text) {
        if text.contains(['.', 'e', 'E']) {
            return Ok(Const::Float(f));
        }
        let digits = text.trim_start_matches(['+', '-']);
        if !digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_') {
            return Err(format!("number {text} overflows int"));
        }
    }
    Err(format!("illegal number syntax: {text:?}"))
}
