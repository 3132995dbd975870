package delta

// DVRelativePath exposes vacuum's deletion vector path rule to the
// external test that checks it against package dv's.
var DVRelativePath = dvRelativePath
