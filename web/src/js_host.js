// The JavaScript functions web/src/bridge.c calls: a model's loss or forward
// function (traced into the graph g) and the optimizer's name filters, both
// registered by web/index.js under a token. An emscripten JS library.
mergeInto(LibraryManager.library, {
  tgjs_trace: function (token, g) { return Module['tgTrace'](token, g); },
  tgjs_filter: function (token, which, name) { return Module['tgFilter'](token, which, UTF8ToString(name)) ? 1 : 0; },
});
