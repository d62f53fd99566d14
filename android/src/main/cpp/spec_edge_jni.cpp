// libspec_edge_jni.so: the JNI bridge of org.specedge.SpeculativeRunner over the runner library.
// Every native method turns a C++ error into a Java exception (ArgumentError:
// IllegalArgumentException, RunnerError: SpecEdgeException) and never lets one cross into the VM.
#include <jni.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "spec_edge/runner.h"
#include "spec_edge/tokenizer.h"
#include "spec_edge/utf8.h"

#ifdef __ANDROID__
#include <android/log.h>
#endif

namespace {

using spec_edge::runner::ArgumentError;
using spec_edge::runner::Runner;
using spec_edge::runner::RunnerError;
using spec_edge::runner::Sampling;
using spec_edge::runner::TextStream;
using spec_edge::runner::Tokenizer;

constexpr char kRunnerClass[] = "org/specedge/SpeculativeRunner";
constexpr char kExceptionClass[] = "org/specedge/SpecEdgeException";
constexpr char kStatsClass[] = "org/specedge/GenerationStats";
constexpr char kCallbackClass[] = "org/specedge/TokenCallback";

// Classes and methods resolved once, in JNI_OnLoad (FindClass on a callback thread would see the
// system class loader, not the app's).
struct JavaRefs {
  jclass exception, stats;
  jmethodID stats_init, on_tokens;
} g_refs;

// A Java exception is already pending (thrown by the callback): unwind the C++ loop, keep it.
struct JavaExceptionPending {};

void log_error(const std::string& message) {
#ifdef __ANDROID__
  __android_log_print(ANDROID_LOG_ERROR, "spec_edge", "%s", message.c_str());
#else
  (void)message;  // a desktop JVM shows the exception itself
#endif
}

void throw_java(JNIEnv* env, jclass cls, const std::string& message) {
  log_error(message);
  env->ThrowNew(cls, message.c_str());
}

void throw_java(JNIEnv* env, const char* cls, const std::string& message) {
  jclass c = env->FindClass(cls);
  if (c != nullptr) throw_java(env, c, message);  // else FindClass left NoClassDefFoundError pending
}

// Runs body, turning whatever it throws into the matching Java exception.
template <class T, class Body>
T guarded(JNIEnv* env, T on_error, Body&& body) {
  try {
    return body();
  } catch (const JavaExceptionPending&) {
  } catch (const ArgumentError& e) {
    throw_java(env, "java/lang/IllegalArgumentException", e.what());
  } catch (const RunnerError& e) {
    throw_java(env, g_refs.exception, e.what());
  } catch (const std::bad_alloc&) {
    throw_java(env, "java/lang/OutOfMemoryError", "spec_edge: out of native memory");
  } catch (const std::exception& e) {
    throw_java(env, g_refs.exception, std::string("spec_edge internal error: ") + e.what());
  }
  return on_error;
}

// The runner of a model directory and, once text is asked for, its tokenizer.
struct Session {
  std::unique_ptr<Runner> runner;
  std::string model_dir;
  std::unique_ptr<Tokenizer> tokenizer;
  std::mutex tokenizer_load;  // encode/decode may run beside a generate call

  const Tokenizer& text() {
    std::lock_guard<std::mutex> lock(tokenizer_load);
    if (!tokenizer) tokenizer = std::make_unique<Tokenizer>(Tokenizer::load_for_programs(model_dir, runner->vocab_size()));
    return *tokenizer;
  }
};

Session& session(jlong handle) { return *reinterpret_cast<Session*>(static_cast<intptr_t>(handle)); }

// A Java string (UTF-16) as UTF-8; a lone surrogate becomes U+FFFD, as String.getBytes(UTF_8) does.
std::string utf8(JNIEnv* env, jstring s) {
  std::u16string units(static_cast<size_t>(env->GetStringLength(s)), u'\0');
  env->GetStringRegion(s, 0, static_cast<jsize>(units.size()), reinterpret_cast<jchar*>(units.data()));
  std::string out;
  for (size_t i = 0; i < units.size(); ++i) {
    uint32_t cp = units[i];
    if (cp >= 0xD800 && cp <= 0xDBFF && i + 1 < units.size() && units[i + 1] >= 0xDC00 && units[i + 1] <= 0xDFFF)
      cp = 0x10000 + ((cp - 0xD800) << 10) + (units[++i] - 0xDC00);
    else if (cp >= 0xD800 && cp <= 0xDFFF)
      cp = 0xFFFD;
    spec_edge::runner::append_utf8(out, cp);
  }
  return out;
}

// UTF-8 bytes to a Java string (UTF-16). Streamed tokens can end inside a character: with
// `final` false an incomplete last sequence stays in `bytes` for the next call; invalid or
// overlong sequences and surrogates become U+FFFD.
jstring java_string(JNIEnv* env, std::string& bytes, bool final) {
  std::u16string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    const int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0) {
      out += u'\uFFFD', ++i;
      continue;
    }
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    int n = 1;
    for (; n < len && i + n < bytes.size(); ++n) {
      const auto b = static_cast<unsigned char>(bytes[i + n]);
      if ((b & 0xC0) != 0x80) break;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (n < len && i + n == bytes.size() && !final) break;  // the rest of the character comes later
    const uint32_t min = len == 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;  // no overlong forms
    if (n < len || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      out += u'\uFFFD', i += n;
      continue;
    }
    if (cp >= 0x10000) {
      out += static_cast<char16_t>(0xD800 + ((cp - 0x10000) >> 10));
      out += static_cast<char16_t>(0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      out += static_cast<char16_t>(cp);
    }
    i += len;
  }
  bytes.erase(0, i);
  jstring s = env->NewString(reinterpret_cast<const jchar*>(out.data()), static_cast<jsize>(out.size()));
  if (s == nullptr) throw JavaExceptionPending{};
  return s;
}

std::vector<int64_t> ids(JNIEnv* env, jlongArray array) {
  std::vector<int64_t> out(static_cast<size_t>(env->GetArrayLength(array)));
  static_assert(sizeof(jlong) == sizeof(int64_t));
  env->GetLongArrayRegion(array, 0, static_cast<jsize>(out.size()), reinterpret_cast<jlong*>(out.data()));
  return out;
}

std::vector<double> doubles(JNIEnv* env, jdoubleArray array) {
  std::vector<double> out(static_cast<size_t>(env->GetArrayLength(array)));
  env->GetDoubleArrayRegion(array, 0, static_cast<jsize>(out.size()), out.data());
  return out;
}

jlongArray java_ids(JNIEnv* env, const std::vector<int64_t>& values) {
  jlongArray out = env->NewLongArray(static_cast<jsize>(values.size()));
  if (out == nullptr) throw JavaExceptionPending{};
  env->SetLongArrayRegion(out, 0, static_cast<jsize>(values.size()), reinterpret_cast<const jlong*>(values.data()));
  return out;
}

// ---- native methods of SpeculativeRunner ------------------------------------------------------

jlong native_load(JNIEnv* env, jclass, jstring model_dir, jint k, jstring drafter, jboolean adaptive_k, jint min_ngram,
                  jint max_ngram, jint min_match, jdouble draft_step_cost, jdouble verify_row_cost,
                  jdoubleArray verify_costs) {
  return guarded<jlong>(env, 0, [&] {
    auto s = std::make_unique<Session>();
    s->model_dir = utf8(env, model_dir);
    s->runner = Runner::load(s->model_dir, k > 0 ? std::optional<int>(k) : std::nullopt,
                             spec_edge::runner::drafting_settings(utf8(env, drafter), adaptive_k, min_ngram, max_ngram,
                                                                  min_match, draft_step_cost, verify_row_cost,
                                                                  doubles(env, verify_costs)));
    return static_cast<jlong>(reinterpret_cast<intptr_t>(s.release()));
  });
}

void native_destroy(JNIEnv*, jclass, jlong handle) { delete &session(handle); }

// k <= 0 means the exported K; the Java side passes any other value through for the runner to check.
jlongArray native_generate(JNIEnv* env, jclass, jlong handle, jlongArray prompt, jint max_new, jfloat temperature,
                           jint top_k, jfloat top_p, jfloat min_p, jfloat repetition_penalty, jlong seed,
                           jboolean speculative, jlong eos, jobject callback, jboolean with_text) {
  return guarded<jlongArray>(env, nullptr, [&] {
    Session& s = session(handle);
    const Tokenizer* tokenizer = with_text ? &s.text() : nullptr;
    std::optional<TextStream> stream;  // holds a character whose last token has not arrived
    if (tokenizer) stream.emplace(*tokenizer);
    std::string pending;
    std::function<void(const std::vector<int64_t>&)> on_tokens;
    if (callback != nullptr)
      on_tokens = [&](const std::vector<int64_t>& tokens) {
        jlongArray array = java_ids(env, tokens);
        jstring text = nullptr;
        if (tokenizer) {
          pending += stream->push(tokens);
          text = java_string(env, pending, /*final=*/false);
        }
        env->CallVoidMethod(callback, g_refs.on_tokens, array, text);
        env->DeleteLocalRef(array);
        if (text) env->DeleteLocalRef(text);
        if (env->ExceptionCheck()) throw JavaExceptionPending{};  // the callback threw: end the call
      };
    const Sampling sampling{temperature, top_k, top_p, min_p, repetition_penalty, seed};
    // Text generation without an explicit end id ends at any of the tokenizer's end tokens.
    const std::vector<int64_t> stop_ids = eos >= 0 ? std::vector<int64_t>{eos}
                                          : tokenizer ? tokenizer->eos_ids() : std::vector<int64_t>{};
    return java_ids(env, s.runner->generate(ids(env, prompt), max_new, sampling, speculative, stop_ids, on_tokens));
  });
}

void native_stop(JNIEnv*, jclass, jlong handle) { session(handle).runner->stop(); }

// StepCosts' layout: context, decode step seconds, draft step cost, the verify costs.
jdoubleArray native_measure_step_costs(JNIEnv* env, jclass, jlong handle, jint repeats) {
  return guarded<jdoubleArray>(env, nullptr, [&] {
    const auto c = session(handle).runner->measure_step_costs({}, Sampling{}, repeats);
    std::vector<double> values = {static_cast<double>(c.context), c.decode_step_seconds, c.draft_step_cost};
    values.insert(values.end(), c.verify_costs.begin(), c.verify_costs.end());
    jdoubleArray out = env->NewDoubleArray(static_cast<jsize>(values.size()));
    if (out == nullptr) throw JavaExceptionPending{};
    env->SetDoubleArrayRegion(out, 0, static_cast<jsize>(values.size()), values.data());
    return out;
  });
}

jobject native_stats(JNIEnv* env, jclass, jlong handle) {
  return guarded<jobject>(env, nullptr, [&] {
    const auto& st = session(handle).runner->stats();
    jlongArray hist = java_ids(env, st.accepted_histogram);
    jlongArray by_drafter = java_ids(env, {st.model_rounds, st.model_proposed, st.model_accepted, st.lookup_rounds,
                                           st.lookup_proposed, st.lookup_accepted, st.plain_steps});
    return env->NewObject(g_refs.stats, g_refs.stats_init, static_cast<jlong>(st.new_tokens),
                          static_cast<jlong>(st.rounds), static_cast<jlong>(st.proposed),
                          static_cast<jlong>(st.accepted), hist, st.prefill_seconds, st.draft_seconds, st.target_seconds, st.total_seconds,
                          by_drafter);
  });
}

jintArray native_shape(JNIEnv* env, jclass, jlong handle) {
  const Runner& r = *session(handle).runner;
  const jint values[] = {r.k(), r.max_k(), static_cast<jint>(r.vocab_size()), static_cast<jint>(r.max_context_len())};
  jintArray out = env->NewIntArray(4);
  if (out != nullptr) env->SetIntArrayRegion(out, 0, 4, values);
  return out;
}

jlongArray native_encode(JNIEnv* env, jclass, jlong handle, jstring text) {
  return guarded<jlongArray>(env, nullptr, [&] { return java_ids(env, session(handle).text().encode(utf8(env, text))); });
}

jstring native_decode(JNIEnv* env, jclass, jlong handle, jlongArray tokens) {
  return guarded<jstring>(env, nullptr, [&] {
    Session& s = session(handle);
    std::string bytes = s.text().decode(ids(env, tokens), /*skip_special_tokens=*/true);
    return java_string(env, bytes, /*final=*/true);
  });
}

jlong native_token_id(JNIEnv* env, jclass, jlong handle, jstring token) {
  return guarded<jlong>(env, -1, [&] { return static_cast<jlong>(session(handle).text().token_id(utf8(env, token))); });
}

// The drafting defaults of the runner (program_format.json's): min_ngram, max_ngram, min_match,
// draft_step_cost, verify_row_cost.
jdoubleArray native_drafting_defaults(JNIEnv* env, jclass) {
  const spec_edge::runner::Drafting d;
  const jdouble values[] = {static_cast<jdouble>(d.min_ngram), static_cast<jdouble>(d.max_ngram),
                            static_cast<jdouble>(d.min_match), d.draft_step_cost, d.verify_row_cost};
  jdoubleArray out = env->NewDoubleArray(5);
  if (out != nullptr) env->SetDoubleArrayRegion(out, 0, 5, values);
  return out;
}

}  // namespace

extern "C" JNIEXPORT jint JNI_OnLoad(JavaVM* vm, void*) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;
  jclass runner = env->FindClass(kRunnerClass);
  jclass exception = env->FindClass(kExceptionClass);
  jclass stats = env->FindClass(kStatsClass);
  jclass callback = env->FindClass(kCallbackClass);
  if (!runner || !exception || !stats || !callback) return JNI_ERR;  // NoClassDefFoundError pending
  g_refs.exception = static_cast<jclass>(env->NewGlobalRef(exception));
  g_refs.stats = static_cast<jclass>(env->NewGlobalRef(stats));
  g_refs.stats_init = env->GetMethodID(stats, "<init>", "(JJJJ[JDDDD[J)V");
  g_refs.on_tokens = env->GetMethodID(callback, "onTokens", "([JLjava/lang/String;)V");
  if (!g_refs.stats_init || !g_refs.on_tokens) return JNI_ERR;
  const JNINativeMethod methods[] = {
      {const_cast<char*>("nativeLoad"), const_cast<char*>("(Ljava/lang/String;ILjava/lang/String;ZIIIDD[D)J"),
       reinterpret_cast<void*>(native_load)},
      {const_cast<char*>("nativeDestroy"), const_cast<char*>("(J)V"), reinterpret_cast<void*>(native_destroy)},
      {const_cast<char*>("nativeGenerate"), const_cast<char*>("(J[JIFIFFFJZJLorg/specedge/TokenCallback;Z)[J"),
       reinterpret_cast<void*>(native_generate)},
      {const_cast<char*>("nativeStop"), const_cast<char*>("(J)V"), reinterpret_cast<void*>(native_stop)},
      {const_cast<char*>("nativeMeasureStepCosts"), const_cast<char*>("(JI)[D"),
       reinterpret_cast<void*>(native_measure_step_costs)},
      {const_cast<char*>("nativeStats"), const_cast<char*>("(J)Lorg/specedge/GenerationStats;"),
       reinterpret_cast<void*>(native_stats)},
      {const_cast<char*>("nativeShape"), const_cast<char*>("(J)[I"), reinterpret_cast<void*>(native_shape)},
      {const_cast<char*>("nativeEncode"), const_cast<char*>("(JLjava/lang/String;)[J"),
       reinterpret_cast<void*>(native_encode)},
      {const_cast<char*>("nativeDecode"), const_cast<char*>("(J[J)Ljava/lang/String;"),
       reinterpret_cast<void*>(native_decode)},
      {const_cast<char*>("nativeTokenId"), const_cast<char*>("(JLjava/lang/String;)J"),
       reinterpret_cast<void*>(native_token_id)},
      {const_cast<char*>("nativeDraftingDefaults"), const_cast<char*>("()[D"),
       reinterpret_cast<void*>(native_drafting_defaults)},
  };
  if (env->RegisterNatives(runner, methods, sizeof(methods) / sizeof(methods[0])) != JNI_OK) return JNI_ERR;
  return JNI_VERSION_1_6;
}
