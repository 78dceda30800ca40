//! Prints the Redis Functions library the server loads (`ojs_store::scripts::LIBRARY`): every include
//! once, then each operation's function with its argument checks, as build.rs assembled it from `lua/`.
//! `cargo run -q -p ojs-store --example library > library.lua` (to read it, or to find the line a Redis
//! error names: `user_function:<line>` counts from the `#!lua` line).

fn main() {
    print!("{}", ojs_store::scripts::LIBRARY);
}
