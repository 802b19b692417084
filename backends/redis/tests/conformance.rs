//! The conformance suite on RedisStore + RedisBus, through the suite's macro like every
//! other backend: a fresh key prefix per case, deleted by the factory's teardown, and
//! reopened as new clients on the same prefix (the Streams bus outlives the restart).

mod common;

use common::factory::RedisFactory;

forge_conformance::conformance_tests!(match RedisFactory::from_env() {
    Some(factory) => factory,
    None => return,
});
