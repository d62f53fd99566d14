// spec_edge._runner_ext: the runner library for Python; spec_edge.NativeRunner wraps it with the
// API of spec_edge.runtime.PteSpeculativeDecoder. The loop runs without the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "spec_edge/runner.h"
#include "spec_edge/tokenizer.h"

namespace py = pybind11;
using spec_edge::runner::ArgumentError;
using spec_edge::runner::Runner;
using spec_edge::runner::RunnerError;
using spec_edge::runner::Sampling;
using spec_edge::runner::GenerationStats;
using spec_edge::runner::TextStream;
using spec_edge::runner::Tokenizer;

PYBIND11_MODULE(_runner_ext, m) {
  // As the command-line runner: ExecuTorch's info messages (its CPU probing when XNNPACK starts)
  // only when asked for.
  spec_edge::runner::show_executorch_info(false);
  m.def("show_executorch_info", &spec_edge::runner::show_executorch_info, py::arg("show"));
  // Arguments out of range: ValueError; a model the runner cannot use: spec_edge's ProgramError.
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const ArgumentError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const RunnerError& e) {
      PyErr_SetString(py::module_::import("spec_edge.runtime").attr("ProgramError").ptr(), e.what());
    }
  });

  py::class_<Runner, std::unique_ptr<Runner>>(m, "Runner")
      .def(py::init([](const std::string& model_dir, std::optional<int> k, const std::string& drafter, bool adaptive_k,
                       int min_ngram, int max_ngram, int min_match, double draft_step_cost, double verify_row_cost,
                       const std::vector<double>& verify_costs) {
             return Runner::load(model_dir, k,
                                 spec_edge::runner::drafting_settings(drafter, adaptive_k, min_ngram, max_ngram,
                                                                      min_match, draft_step_cost, verify_row_cost,
                                                                      verify_costs));
           }),
           py::arg("model_dir"), py::arg("k"), py::arg("drafter"), py::arg("adaptive_k"), py::arg("min_ngram"),
           py::arg("max_ngram"), py::arg("min_match"), py::arg("draft_step_cost"), py::arg("verify_row_cost"),
           py::arg("verify_costs"), py::call_guard<py::gil_scoped_release>())
      .def(
          "generate",
          [](Runner& runner, const std::vector<int64_t>& prompt, int64_t max_new, const Sampling& sampling,
             bool speculative, const std::vector<int64_t>& eos, const py::object& on_tokens) {
            std::function<void(const std::vector<int64_t>&)> stream;
            if (!on_tokens.is_none())
              stream = [&on_tokens](const std::vector<int64_t>& tokens) {
                py::gil_scoped_acquire gil;
                on_tokens(tokens);  // a Python exception propagates out of generate
              };
            py::gil_scoped_release no_gil;
            return runner.generate(prompt, max_new, sampling, speculative, eos, stream);
          },
          py::arg("prompt"), py::arg("max_new"), py::arg("sampling"), py::arg("speculative"), py::arg("eos"),
          py::arg("on_tokens"))
      .def(
          "measure_step_costs",
          [](Runner& runner, const std::vector<int64_t>& prompt, const Sampling& sampling, int repeats) {
            spec_edge::runner::StepCosts c;
            {
              py::gil_scoped_release no_gil;
              c = runner.measure_step_costs(prompt, sampling, repeats);
            }
            return py::dict(py::arg("context") = c.context, py::arg("decode_step_seconds") = c.decode_step_seconds,
                            py::arg("draft_step_cost") = c.draft_step_cost, py::arg("verify_costs") = c.verify_costs);
          },
          py::arg("prompt"), py::arg("sampling"), py::arg("repeats"))
      .def("stop", &Runner::stop)  // no GIL needed: sets a flag the loop reads
      .def("stats",
           [](const Runner& runner) {
             const GenerationStats& s = runner.stats();
             return py::dict(py::arg("new_tokens") = s.new_tokens, py::arg("rounds") = s.rounds,
                             py::arg("proposed") = s.proposed, py::arg("accepted") = s.accepted,
                             py::arg("accepted_histogram") = s.accepted_histogram, py::arg("prefill_seconds") = s.prefill_seconds,
                             py::arg("draft_seconds") = s.draft_seconds, py::arg("target_seconds") = s.target_seconds,
                             py::arg("total_seconds") = s.total_seconds, py::arg("model_rounds") = s.model_rounds,
                             py::arg("model_proposed") = s.model_proposed, py::arg("model_accepted") = s.model_accepted,
                             py::arg("lookup_rounds") = s.lookup_rounds, py::arg("lookup_proposed") = s.lookup_proposed,
                             py::arg("lookup_accepted") = s.lookup_accepted, py::arg("plain_steps") = s.plain_steps);
           })
      .def_property_readonly("k", &Runner::k)
      .def_property_readonly("max_k", &Runner::max_k)
      .def_property_readonly("vocab_size", &Runner::vocab_size)
      .def_property_readonly("max_context_len", &Runner::max_context_len);

  // spec_edge.NativeTokenizer's core: text as str (or bytes, ill-formed UTF-8 reading as U+FFFD).
  py::class_<Tokenizer>(m, "Tokenizer")
      .def(py::init([](const std::string& path) { return Tokenizer::load(path); }), py::arg("path"))
      .def("encode", &Tokenizer::encode, py::arg("text"), py::arg("add_special_tokens"),
           py::call_guard<py::gil_scoped_release>())
      .def("decode", &Tokenizer::decode, py::arg("ids"), py::arg("skip_special_tokens"),
           py::call_guard<py::gil_scoped_release>())
      .def("pre_tokenize", &Tokenizer::pre_tokenize, py::arg("text"))
      .def("token_id", &Tokenizer::token_id, py::arg("token"))
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &Tokenizer::bos_id)
      .def_property_readonly("eos_ids", &Tokenizer::eos_ids);
  // The runner's streaming text; bytes, since a push may end inside no character but the
  // stream's own output is always whole characters.
  py::class_<TextStream>(m, "TextStream")
      .def(py::init<const Tokenizer&, bool>(), py::arg("tokenizer"), py::arg("skip_special_tokens"),
           py::keep_alive<1, 2>())
      .def("push", [](TextStream& s, const std::vector<int64_t>& ids) { return py::bytes(s.push(ids)); })
      .def("finish", [](TextStream& s) { return py::bytes(s.finish()); });

  // The drafting decisions alone (drafting.h), for the tests that hold them to spec_edge.drafters'.
  py::class_<spec_edge::runner::PromptLookup>(m, "PromptLookup")
      .def(py::init<int, int>(), py::arg("min_ngram"), py::arg("max_ngram"))
      .def("extend", &spec_edge::runner::PromptLookup::extend, py::arg("tokens"))
      .def("propose", [](const spec_edge::runner::PromptLookup& l, int k, const std::vector<int64_t>& after,
                         bool resume) {
        auto p = l.propose(k, after, resume);
        return py::make_tuple(p.ngram, p.tokens);
      }, py::arg("k"), py::arg("after") = std::vector<int64_t>{}, py::arg("resume") = true);
  m.def(
      "round_costs",
      [](double draft_step_cost, double verify_row_cost, const std::vector<double>& verify_costs, int k_max,
         bool model_drafts) {
        spec_edge::runner::Drafting d;
        d.draft_step_cost = draft_step_cost, d.verify_row_cost = verify_row_cost, d.verify_costs = verify_costs;
        return spec_edge::runner::round_costs(d, k_max, model_drafts);
      },
      py::arg("draft_step_cost"), py::arg("verify_row_cost"), py::arg("verify_costs"), py::arg("k_max"),
      py::arg("model_drafts"));
  py::class_<spec_edge::runner::AdaptiveK>(m, "AdaptiveK")
      .def(py::init<std::vector<double>>(), py::arg("costs"))
      .def("next", &spec_edge::runner::AdaptiveK::next)
      .def("record", &spec_edge::runner::AdaptiveK::record, py::arg("proposed"), py::arg("accepted"));

  py::class_<Sampling>(m, "Sampling")
      .def(py::init([](float temperature, int64_t top_k, float top_p, float min_p, float repetition_penalty,
                       int64_t seed) { return Sampling{temperature, top_k, top_p, min_p, repetition_penalty, seed}; }),
           py::arg("temperature"), py::arg("top_k"), py::arg("top_p"), py::arg("min_p"),
           py::arg("repetition_penalty"), py::arg("seed"));
}
