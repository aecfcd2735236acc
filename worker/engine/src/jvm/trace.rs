//! Reading a Java/Kotlin stack trace: the text `Throwable.printStackTrace` prints (also inside
//! Android's logcat), or a Sentry event's `exception.values`.
//!
//! Text (Oracle's `Throwable.printStackTrace` documentation describes the shape): a throwable
//! line `class[: message]` (optionally after `Exception in thread "name" `), frames
//! `\tat class.method(File.java:12)` (also `(Unknown Source)`, `(Native Method)`, and Java 9+'s
//! `module@version/` or `loader//` prefixes, which are dropped), `... N more`, then
//! `Caused by: class[: message]` and `Suppressed: …` with their own frames. Lines with a logcat
//! prefix (threadtime `MM-DD HH:MM:SS.mmm PID TID L TAG: ` or brief `L/TAG(PID): `) are read
//! without it, and the `FATAL EXCEPTION:` / `Process:` lines Android's `AndroidRuntime` prints
//! before a crash are skipped. A line that is none of these after a throwable line continues
//! its message (messages may span lines); any other text is ignored.
//!
//! Sentry event (JSON, detected by a leading `{`;
//! <https://develop.sentry.dev/sdk/data-model/event-payloads/exception/>): `exception.values[]`
//! with `type`, `module` (the package), `value` (the message) and `stacktrace.frames[]`
//! (`module` = the class, `function`, `filename`, `lineno`), ordered cause first and oldest
//! call first, as Sentry's SDKs send them; read here as the text's order (the thrown exception
//! first, innermost call first). `debug_meta.images[]` of `type` `proguard` name the mapping
//! files by `uuid`.

use serde::Deserialize;

/// Most exceptions (thrown, causes, suppressed) read from one trace; more is refused.
pub const MAX_EXCEPTIONS: usize = 1_000;
/// Most frames read from one trace, over all its exceptions; more is refused.
pub const MAX_FRAMES: usize = 100_000;

/// A trace as read, obfuscated names and all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmTrace {
    /// The shape it was read from.
    pub format: JvmTraceFormat,
    /// The exceptions: the thrown one first, then each `Caused by` (and `Suppressed`) in order.
    pub exceptions: Vec<JvmException>,
    /// The ProGuard mapping ids the report names (a Sentry event's `debug_meta.images` of type
    /// `proguard`), lowercase with dashes, in the report's order; empty for text.
    pub mapping_ids: Vec<String>,
}

/// The shape a trace was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JvmTraceFormat {
    /// `Throwable.printStackTrace` text, possibly with logcat prefixes.
    Text,
    /// A Sentry event's `exception.values`.
    Sentry,
}

/// How an exception relates to the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// The exception that was thrown (the first).
    Thrown,
    /// `Caused by:`: the cause of the exception before it at the same depth.
    CausedBy,
    /// `Suppressed:` by the exception before it one level up (`try`-with-resources).
    Suppressed,
}

/// One exception of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmException {
    /// How it relates to the exception that encloses it: the nearest one before it with a
    /// smaller `depth` (`Suppressed`), or of the same depth (`CausedBy`).
    pub relation: Relation,
    /// How deep it is nested: 0 for the thrown exception and its causes, 1 for an exception
    /// suppressed by one of them and that one's causes (`\tSuppressed:`, `\tCaused by:`), and so
    /// on: the tabs before its line, as `printStackTrace` indents it.
    pub depth: u32,
    /// The exception's class, fully qualified, as given (obfuscated).
    pub class: String,
    /// Its message, when it has one.
    pub message: Option<String>,
    /// Its frames, innermost call first.
    pub frames: Vec<JvmFrame>,
    /// `... N more`: frames it shares with the exception that encloses it, not printed.
    pub omitted_frames: u32,
}

/// One frame as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmFrame {
    /// The class, fully qualified (`com.example.a`, `a.b$c`), without module or loader prefix.
    pub class: String,
    /// The method (`a`, `<init>`, `lambda$run$0`).
    pub method: String,
    /// The source file the frame names (`SourceFile` after obfuscation), when it names one.
    pub file: Option<String>,
    /// The 1-based line, when given (absent for `Unknown Source` and `Native Method`).
    pub line: Option<u32>,
}

/// Why a trace cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JvmTraceError {
    /// Neither shape: no exception with a frame or class was found.
    #[error(
        "no Java stack trace found (expected `Exception: message` and `\tat class.method(File.java:1)` lines, or a Sentry event with exception.values)"
    )]
    NoTrace,
    /// JSON that is not a Sentry event of the expected shape.
    #[error("the Sentry event cannot be read: {0}")]
    Json(String),
    /// More exceptions or frames than [`MAX_EXCEPTIONS`] / [`MAX_FRAMES`].
    #[error("the trace has more than {MAX_EXCEPTIONS} exceptions or {MAX_FRAMES} frames")]
    TooLarge,
}

/// Reads `input` (text or a Sentry event JSON, detected by content).
///
/// # Errors
/// [`JvmTraceError`]: no trace in it, a JSON document that is no Sentry event, or a trace over
/// the limits. Invalid UTF-8 is read lossily.
pub fn parse_trace(input: &[u8]) -> Result<JvmTrace, JvmTraceError> {
    let text = String::from_utf8_lossy(input);
    if text.trim_start().starts_with('{') {
        return parse_sentry(&text);
    }
    parse_text(&text)
}

fn parse_text(text: &str) -> Result<JvmTrace, JvmTraceError> {
    let mut exceptions: Vec<JvmException> = Vec::new();
    let mut frames = 0usize;
    // Whether the last line read was a throwable line (or its message's continuation).
    let mut in_message = false;
    // The logcat source (process, thread, tag) of the first exception: lines other processes,
    // threads or tags logged in between are not the crash's.
    let mut crash_source: Option<LogSource<'_>> = None;
    for raw in text.lines() {
        let (line, source) = strip_logcat_prefix(raw.trim_end_matches('\r'));
        if let (Some(crash), Some(source)) = (&crash_source, &source)
            && !same_source(crash, source)
        {
            continue;
        }
        let depth = line.bytes().take_while(|b| *b == b'\t').count() as u32;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            in_message = false;
            continue;
        }
        if let Some(frame) = parse_frame(trimmed) {
            in_message = false;
            let Some(last) = exceptions.last_mut() else {
                // Frames before any throwable line: an exception of unknown class.
                exceptions.push(JvmException {
                    relation: Relation::Thrown,
                    depth: 0,
                    class: String::new(),
                    message: None,
                    frames: vec![frame],
                    omitted_frames: 0,
                });
                crash_source = crash_source.or(source);
                frames += 1;
                continue;
            };
            frames += 1;
            if frames > MAX_FRAMES {
                return Err(JvmTraceError::TooLarge);
            }
            last.frames.push(frame);
            continue;
        }
        if let Some(n) = trimmed
            .strip_prefix("... ")
            .and_then(|rest| rest.strip_suffix(" more"))
            .and_then(|n| n.parse::<u32>().ok())
        {
            in_message = false;
            if let Some(last) = exceptions.last_mut() {
                last.omitted_frames = n;
            }
            continue;
        }
        if trimmed.starts_with("FATAL EXCEPTION:") || trimmed.starts_with("Process: ") {
            in_message = false;
            continue;
        }
        let (relation, rest) = if let Some(rest) = trimmed.strip_prefix("Caused by: ") {
            (Relation::CausedBy, Some(rest))
        } else if let Some(rest) = trimmed.strip_prefix("Suppressed: ") {
            (Relation::Suppressed, Some(rest))
        } else if let Some(rest) = strip_thread_prefix(trimmed) {
            (Relation::Thrown, Some(rest))
        } else {
            (Relation::Thrown, None)
        };
        // A plain `class: message` line starts an exception unless it continues a message:
        // a continuation is any line after the throwable line that is not a frame, and not a
        // throwable line whose class has a package.
        let explicit = rest.is_some();
        let candidate = rest.unwrap_or(trimmed);
        match parse_throwable(candidate) {
            Some((class, message))
                if explicit || !in_message || class.contains('.') || exceptions.is_empty() =>
            {
                if exceptions.len() >= MAX_EXCEPTIONS {
                    return Err(JvmTraceError::TooLarge);
                }
                let (relation, depth) = if exceptions.is_empty() {
                    crash_source = source;
                    (Relation::Thrown, 0)
                } else if relation == Relation::Thrown {
                    // A second trace in the same text: read as a cause would hide it; keep
                    // it as another exception of the report.
                    (Relation::CausedBy, 0)
                } else {
                    (relation, depth)
                };
                exceptions.push(JvmException {
                    relation,
                    depth,
                    class: class.to_owned(),
                    message: message.map(str::to_owned),
                    frames: Vec::new(),
                    omitted_frames: 0,
                });
                in_message = true;
            }
            _ if in_message => {
                if let Some(last) = exceptions.last_mut() {
                    let message = last.message.get_or_insert_with(String::new);
                    message.push('\n');
                    message.push_str(line);
                }
            }
            _ => {}
        }
    }
    // A throwable line with no frame after it and no other exception is not a trace.
    if exceptions.is_empty() || exceptions.iter().all(|e| e.frames.is_empty()) {
        return Err(JvmTraceError::NoTrace);
    }
    Ok(JvmTrace {
        format: JvmTraceFormat::Text,
        exceptions,
        mapping_ids: Vec::new(),
    })
}

/// Who logged a logcat line: process id, thread id (threadtime only) and tag.
type LogSource<'a> = (&'a str, Option<&'a str>, &'a str);

/// Whether two logcat lines come from the same process, tag and (when both formats say)
/// thread.
fn same_source(a: &LogSource<'_>, b: &LogSource<'_>) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1.is_none() || b.1.is_none() || a.1 == b.1)
}

/// `line` without a logcat prefix (threadtime `11-27 10:15:02.731  4321  4321 E Tag: `, or brief
/// `E/Tag( 4321): `) and who logged it, or `line` as it is.
fn strip_logcat_prefix(line: &str) -> (&str, Option<LogSource<'_>>) {
    let bytes = line.as_bytes();
    // threadtime: MM-DD HH:MM:SS.mmm <pid> <tid> <level> <tag>: <text>
    if bytes.len() > 19
        && bytes[2] == b'-'
        && bytes[5] == b' '
        && bytes[8] == b':'
        && bytes[11] == b':'
        && bytes[14] == b'.'
        && bytes[..2].iter().all(u8::is_ascii_digit)
        && let Some(rest) = line.get(18..)
    {
        let mut fields = rest.split_ascii_whitespace();
        let pid = fields.next();
        let tid = fields.next();
        let level = fields.next();
        if let (Some(pid), Some(tid), Some(level)) = (pid, tid, level)
            && pid.bytes().all(|b| b.is_ascii_digit())
            && tid.bytes().all(|b| b.is_ascii_digit())
            && level.len() == 1
            && let Some(at) = line.find(": ")
        {
            // The tag: after the level, up to the `: `.
            let tag = line[..at]
                .rsplit_once(&format!(" {level} "))
                .map_or("", |(_, tag)| tag.trim());
            return (&line[at + 2..], Some((pid, Some(tid), tag)));
        }
    }
    // brief: L/Tag(  pid): text
    if bytes.len() > 3
        && bytes[1] == b'/'
        && b"VDIWEFA".contains(&bytes[0])
        && let Some(close) = line.find("): ")
        && let Some(open) = line[..close].rfind('(')
    {
        let (tag, pid) = (line[2..open].trim(), line[open + 1..close].trim());
        return (&line[close + 3..], Some((pid, None, tag)));
    }
    (line, None)
}

/// The rest of `Exception in thread "name" class: message`.
fn strip_thread_prefix(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("Exception in thread \"")?;
    let close = rest.find("\" ")?;
    Some(&rest[close + 2..])
}

/// `(class, message)` of a throwable line `class[: message]`, when `class` is a Java class name
/// (identifiers joined by `.`; `$` and `-` allowed, as obfuscators and Kotlin write them).
fn parse_throwable(line: &str) -> Option<(&str, Option<&str>)> {
    let (class, message) = match line.split_once(':') {
        Some((class, message)) => (class, Some(message.strip_prefix(' ').unwrap_or(message))),
        None => (line, None),
    };
    is_class_name(class).then_some((class, message))
}

fn is_class_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 1024
        && name.split('.').all(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_' || c == '$')
                && chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '-'))
        })
}

/// A frame line `at [module/]class.method(File.java:12)` (or with no location), trimmed.
fn parse_frame(line: &str) -> Option<JvmFrame> {
    let inner = line.strip_prefix("at ")?;
    // `at class.method` without a location is printed by some tools (and test data).
    let (qualified, location) = match inner.strip_suffix(')') {
        Some(inner) => inner.split_once('(')?,
        None if !inner.contains(['(', ' ']) => (inner, ""),
        None => return None,
    };
    let (class, method) = qualified.rsplit_once('.')?;
    // A hidden class (Java 15+ lambdas) prints its address: `X$$Lambda$14/0x0000000800c03000`.
    let class = match class.rfind("/0x") {
        Some(at) => &class[..at],
        None => class,
    };
    // Java 9+: `java.base/java.util.X.m`, `app//com.example.X.m`, `mod@1.0/…`: class names
    // have no `/`.
    let class = class.rsplit('/').next().unwrap_or(class);
    if class.is_empty() || method.is_empty() || method.contains(' ') {
        return None;
    }
    let (file, line) = match location.rsplit_once(':') {
        Some((file, line)) => match line.parse::<u32>() {
            Ok(line) => (Some(file), Some(line)),
            Err(_) => (Some(location), None),
        },
        None => (Some(location), None),
    };
    let file = file.filter(|f| !f.is_empty() && *f != "Unknown Source" && *f != "Native Method");
    Some(JvmFrame {
        class: class.to_owned(),
        method: method.to_owned(),
        file: file.map(str::to_owned),
        line: line.filter(|l| *l > 0),
    })
}

#[derive(Deserialize)]
struct SentryEvent {
    exception: Option<SentryValues>,
    debug_meta: Option<SentryDebugMeta>,
}

#[derive(Deserialize)]
struct SentryValues {
    #[serde(default)]
    values: Vec<SentryException>,
}

/// A JSON value of any type: events from many SDK versions put numbers where strings are
/// expected and the reverse; what is not the expected type reads as absent.
type Any = Option<serde_json::Value>;

fn text_of(value: Any) -> Option<String> {
    match value? {
        serde_json::Value::String(s) => Some(s),
        _ => None,
    }
}

/// A positive line number (older sentry-java sends `-2` for native methods, `0` for unknown).
fn line_of(value: Any) -> Option<u32> {
    let line = match value? {
        serde_json::Value::Number(n) => n.as_i64()?,
        serde_json::Value::String(s) => s.parse().ok()?,
        _ => return None,
    };
    u32::try_from(line).ok().filter(|l| *l > 0)
}

#[derive(Deserialize)]
struct SentryException {
    #[serde(rename = "type")]
    ty: Any,
    module: Any,
    value: Any,
    stacktrace: Option<SentryStacktrace>,
}

#[derive(Deserialize)]
struct SentryStacktrace {
    #[serde(default)]
    frames: Vec<SentryFrame>,
}

#[derive(Deserialize)]
struct SentryFrame {
    module: Any,
    function: Any,
    filename: Any,
    lineno: Any,
}

#[derive(Deserialize)]
struct SentryDebugMeta {
    #[serde(default)]
    images: Vec<SentryImage>,
}

#[derive(Deserialize)]
struct SentryImage {
    #[serde(rename = "type")]
    ty: Any,
    uuid: Any,
}

fn parse_sentry(text: &str) -> Result<JvmTrace, JvmTraceError> {
    let event: SentryEvent =
        serde_json::from_str(text).map_err(|e| JvmTraceError::Json(e.to_string()))?;
    let values = event.exception.map(|e| e.values).unwrap_or_default();
    if values.len() > MAX_EXCEPTIONS {
        return Err(JvmTraceError::TooLarge);
    }
    if values
        .iter()
        .map(|v| v.stacktrace.as_ref().map_or(0, |s| s.frames.len()))
        .sum::<usize>()
        > MAX_FRAMES
    {
        return Err(JvmTraceError::TooLarge);
    }
    let mut exceptions: Vec<JvmException> = values
        .into_iter()
        .rev()
        .map(|value| {
            let class = match (
                text_of(value.module).filter(|m| !m.is_empty()),
                text_of(value.ty),
            ) {
                (Some(module), Some(ty)) => format!("{module}.{ty}"),
                (None, Some(ty)) => ty,
                (Some(module), None) => module,
                (None, None) => String::new(),
            };
            let frames = value
                .stacktrace
                .map(|s| s.frames)
                .unwrap_or_default()
                .into_iter()
                .rev()
                .filter_map(|f| {
                    Some(JvmFrame {
                        class: text_of(f.module).filter(|m| !m.is_empty())?,
                        method: text_of(f.function).filter(|m| !m.is_empty())?,
                        file: text_of(f.filename).filter(|f| !f.is_empty()),
                        line: line_of(f.lineno),
                    })
                })
                .collect();
            JvmException {
                relation: Relation::CausedBy,
                depth: 0,
                class,
                message: text_of(value.value),
                frames,
                omitted_frames: 0,
            }
        })
        .collect();
    let Some(first) = exceptions.first_mut() else {
        return Err(JvmTraceError::NoTrace);
    };
    first.relation = Relation::Thrown;
    let mapping_ids = event
        .debug_meta
        .map(|d| d.images)
        .unwrap_or_default()
        .into_iter()
        .filter(|i| text_of(i.ty.clone()).as_deref() == Some("proguard"))
        .filter_map(|i| text_of(i.uuid))
        .map(|u| u.to_ascii_lowercase())
        .collect();
    Ok(JvmTrace {
        format: JvmTraceFormat::Sentry,
        exceptions,
        mapping_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(class: &str, method: &str, file: Option<&str>, line: Option<u32>) -> JvmFrame {
        JvmFrame {
            class: class.into(),
            method: method.into(),
            file: file.map(Into::into),
            line,
        }
    }

    #[test]
    fn text_with_causes_module_prefixes_and_omitted_frames() {
        let trace = parse_trace(
            b"Exception in thread \"main\" a.b: order 0 failed\n\
              \tat a.c.d(SourceFile:12)\n\
              \tat java.base/java.util.X.run(X.java:3)\n\
              \tat app//a.c.<init>(Unknown Source)\n\
              \tat a.c.n(Native Method)\n\
              \tat e.a.c.a.onClick\n\
              Caused by: java.lang.IllegalStateException: bad\n\
              second line of the message\n\
              \tat a.e.f(SourceFile:1)\n\
              \t... 3 more\n",
        )
        .unwrap();
        assert_eq!(trace.format, JvmTraceFormat::Text);
        assert_eq!(trace.exceptions.len(), 2);
        let thrown = &trace.exceptions[0];
        assert_eq!(thrown.relation, Relation::Thrown);
        assert_eq!(thrown.class, "a.b");
        assert_eq!(thrown.message.as_deref(), Some("order 0 failed"));
        assert_eq!(
            thrown.frames,
            [
                frame("a.c", "d", Some("SourceFile"), Some(12)),
                frame("java.util.X", "run", Some("X.java"), Some(3)),
                frame("a.c", "<init>", None, None),
                frame("a.c", "n", None, None),
                frame("e.a.c.a", "onClick", None, None),
            ]
        );
        let cause = &trace.exceptions[1];
        assert_eq!(cause.relation, Relation::CausedBy);
        assert_eq!(cause.class, "java.lang.IllegalStateException");
        assert_eq!(
            cause.message.as_deref(),
            Some("bad\nsecond line of the message")
        );
        assert_eq!(cause.omitted_frames, 3);
        assert_eq!(
            cause.frames,
            [frame("a.e", "f", Some("SourceFile"), Some(1))]
        );
    }

    #[test]
    fn logcat_prefixes_and_android_header_lines() {
        let trace = parse_trace(
            b"11-27 10:15:02.731  4321  4321 E AndroidRuntime: FATAL EXCEPTION: main\n\
              11-27 10:15:02.731  4321  4321 E AndroidRuntime: Process: com.example, PID: 4321\n\
              11-27 10:15:02.731  4321  4321 E AndroidRuntime: a: boom\n\
              11-27 10:15:02.731  4321  4321 E AndroidRuntime: \tat a.b(SourceFile:7)\n\
              E/AndroidRuntime( 4321): Caused by: b.c: inner\n\
              E/AndroidRuntime( 4321): \tat b.d(SourceFile:8)\n",
        )
        .unwrap();
        let classes: Vec<_> = trace.exceptions.iter().map(|e| e.class.as_str()).collect();
        assert_eq!(classes, ["a", "b.c"]);
        assert_eq!(trace.exceptions[0].message.as_deref(), Some("boom"));
        assert_eq!(
            trace.exceptions[1].frames,
            [frame("b", "d", Some("SourceFile"), Some(8))]
        );
    }

    #[test]
    fn sentry_event_reads_cause_first_oldest_first_in_text_order() {
        let trace = parse_trace(
            br#"{"exception":{"values":[
                {"type":"IllegalStateException","module":"java.lang","value":"bad",
                 "stacktrace":{"frames":[{"module":"a.c","function":"main","lineno":3},
                                         {"module":"a.d","function":"a","filename":"SourceFile","lineno":9}]}},
                {"type":"b","module":"a","value":"outer","stacktrace":{"frames":[{"module":"a.c","function":"main","lineno":0}]}}]},
               "debug_meta":{"images":[{"type":"proguard","uuid":"A5C7B3F2-0000-5000-8000-000000000001"},{"type":"macho","uuid":"x"}]}}"#,
        )
        .unwrap();
        assert_eq!(trace.format, JvmTraceFormat::Sentry);
        assert_eq!(trace.mapping_ids, ["a5c7b3f2-0000-5000-8000-000000000001"]);
        assert_eq!(trace.exceptions[0].class, "a.b");
        assert_eq!(trace.exceptions[0].relation, Relation::Thrown);
        assert_eq!(
            trace.exceptions[0].frames,
            [frame("a.c", "main", None, None)]
        );
        assert_eq!(trace.exceptions[1].class, "java.lang.IllegalStateException");
        assert_eq!(trace.exceptions[1].relation, Relation::CausedBy);
        assert_eq!(
            trace.exceptions[1].frames,
            [
                frame("a.d", "a", Some("SourceFile"), Some(9)),
                frame("a.c", "main", None, Some(3))
            ]
        );
    }

    #[test]
    fn a_prefix_cut_inside_a_character_is_no_prefix() {
        // Found by fuzzing (jvm_trace): byte 18 inside U+FFFD, where a threadtime prefix ends.
        let line = "11-27 10:15:02.73\u{fffd}\u{fffd} 4321 E Tag: a.B: x";
        assert_eq!(strip_logcat_prefix(line), (line, None));
        let trace = format!("{line}\n\tat a.c.d(SourceFile:1)\n");
        assert_eq!(parse_trace(trace.as_bytes()).unwrap().exceptions.len(), 1);
    }

    #[test]
    fn suppressed_exceptions_nest_by_their_tabs() {
        let trace = parse_trace(
            b"a.Main: outer\n\
              \tat a.b.run(SourceFile:1)\n\
              \tSuppressed: a.S: closing\n\
              \t\tat a.c.close(SourceFile:2)\n\
              \tCaused by: a.C: inner\n\
              \t\tat a.d.io(SourceFile:3)\n\
              \t\t... 1 more\n",
        )
        .unwrap();
        let shape: Vec<_> = trace
            .exceptions
            .iter()
            .map(|e| (e.class.as_str(), e.relation, e.depth, e.frames.len()))
            .collect();
        assert_eq!(
            shape,
            [
                ("a.Main", Relation::Thrown, 0, 1),
                ("a.S", Relation::Suppressed, 1, 1),
                ("a.C", Relation::CausedBy, 1, 1)
            ]
        );
        assert_eq!(trace.exceptions[2].omitted_frames, 1);
    }

    #[test]
    fn other_threads_and_tags_logged_in_between_are_not_the_crash() {
        let trace = parse_trace(
            b"11-27 10:15:02.731  4321  4321 E AndroidRuntime: a.B: boom\n\
              11-27 10:15:02.731  4321  4321 E AndroidRuntime: \tat a.b.c(SourceFile:7)\n\
              11-27 10:15:02.732  4321  4400 D MainActivity: onResume: called\n\
              11-27 10:15:02.732  4321  4400 D MainActivity: \tat x.y.z(SourceFile:1)\n\
              11-27 10:15:02.733  4321  4321 E AndroidRuntime: \tat a.b.d(SourceFile:8)\n",
        )
        .unwrap();
        assert_eq!(trace.exceptions.len(), 1);
        assert_eq!(
            trace.exceptions[0].frames,
            [
                frame("a.b", "c", Some("SourceFile"), Some(7)),
                frame("a.b", "d", Some("SourceFile"), Some(8))
            ]
        );
    }

    #[test]
    fn hidden_classes_and_lenient_sentry_fields() {
        let trace =
            parse_trace(b"a.B: x\n\tat a.C$$Lambda$14/0x0000000800c03000.run(Unknown Source)\n")
                .unwrap();
        assert_eq!(
            trace.exceptions[0].frames,
            [frame("a.C$$Lambda$14", "run", None, None)]
        );
        // Older sentry-java: lineno -2 for native methods; a number where a string goes.
        let trace = parse_trace(
            br#"{"exception":{"values":[{"type":"B","module":"a","value":7,
                "stacktrace":{"frames":[{"module":"a.c","function":"n","lineno":-2},
                                        {"module":"a.c","function":"m","lineno":"12"}]}}]}}"#,
        )
        .unwrap();
        assert_eq!(trace.exceptions[0].message, None);
        assert_eq!(
            trace.exceptions[0].frames,
            [
                frame("a.c", "m", None, Some(12)),
                frame("a.c", "n", None, None)
            ]
        );
    }

    #[test]
    fn not_a_trace() {
        assert_eq!(parse_trace(b""), Err(JvmTraceError::NoTrace));
        assert_eq!(parse_trace(b"hello world\n"), Err(JvmTraceError::NoTrace));
        assert_eq!(
            parse_trace(b"java.lang.Error: no frames\n"),
            Err(JvmTraceError::NoTrace)
        );
        assert!(matches!(
            parse_trace(b"{\"exception\": 3}"),
            Err(JvmTraceError::Json(_))
        ));
        assert_eq!(parse_trace(b"{}"), Err(JvmTraceError::NoTrace));
        let many = format!(
            "a.B: x\n{}",
            "\tat a.b.c(SourceFile:1)\n".repeat(MAX_FRAMES + 1)
        );
        assert_eq!(parse_trace(many.as_bytes()), Err(JvmTraceError::TooLarge));
    }
}
