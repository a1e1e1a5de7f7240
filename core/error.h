// Error types of tessera. Every error a user can cause is one of these, with a message that
// names the object (tensor, dimension, spec, mesh, file, dataset) it is about.
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A spec or shape string that does not parse, names an unknown mesh axis, uses an axis twice,
// or does not divide a dimension.
class SpecError : public Error {
 public:
  using Error::Error;
};

// Shapes that disagree: operands of an op, a bound dimension name, a local block.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// Element types that an op does not take, or operands whose dtypes differ (an f32 tensor read as
// f64, an integer tensor given to a float op, a cast between dtypes that do not convert).
class DTypeError : public Error {
 public:
  using Error::Error;
};

// Logical axis rules: a logical name twice in one tensor, a name no rule matches.
class RuleError : public Error {
 public:
  using Error::Error;
};

// A mesh that is invalid (its text does not parse, an axis name twice or not an identifier, a
// size below 1, more than INT_MAX ranks), that does not fit its communicator, or tensors on
// different meshes.
class MeshError : public Error {
 public:
  using Error::Error;
};

// An MPI call that returned an error code.
class MpiError : public Error {
 public:
  using Error::Error;
};

// Checkpoint files: open, read, write, validate.
class IoError : public Error {
 public:
  using Error::Error;
};

// A checkpoint whose data fails its checks: a Fletcher32 mismatch, a chunk that disagrees with
// the file's digest, a file cut short. Programs exit with code 3 for it (2 is bad input).
class IntegrityError : public IoError {
 public:
  using IoError::IoError;
};

// A bad command-line flag or configuration value.
class UsageError : public Error {
 public:
  using Error::Error;
};

}  // namespace tessera
