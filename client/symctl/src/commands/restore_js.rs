//! `symctl restore-js`: a JavaScript stack and its source map in, original positions out.

use anyhow::Context;
use symcluster_engine::js::{JsSourceMap, parse_stack, render, restore};

use crate::cli::RestoreJsArgs;

pub fn run(args: &RestoreJsArgs) -> anyhow::Result<()> {
    let stack_bytes = std::fs::read(&args.stack)
        .with_context(|| format!("cannot read {}", args.stack.display()))?;
    let stack = parse_stack(&stack_bytes, args.input_column_start)
        .with_context(|| args.stack.display().to_string())?;
    let map_bytes = std::fs::read(&args.sourcemap)
        .with_context(|| format!("cannot read {}", args.sourcemap.display()))?;
    let bundle = match &args.bundle {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            match String::from_utf8(bytes) {
                Ok(text) => Some(text),
                Err(_) => {
                    eprintln!(
                        "symctl: warning: {} is not JavaScript text (a RAM bundle?); function \
                         names come from the map's function maps only",
                        path.display()
                    );
                    None
                }
            }
        }
        None => None,
    };
    let map = JsSourceMap::parse(&map_bytes, bundle.as_deref())
        .with_context(|| args.sourcemap.display().to_string())?;
    let result = restore(&stack, &map);

    super::output::print_stack(args.format, &result, || {
        let input = String::from_utf8_lossy(&stack_bytes);
        render::metro_text(&input, &stack, &result, &map, args.input_column_start)
    })
}
